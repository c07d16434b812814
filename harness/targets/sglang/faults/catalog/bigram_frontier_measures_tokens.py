"""EAGLE's bigram key is one shorter than its tokens, but the checkpoint's SWA frontier is measured on the tokens."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-bigram-frontier-measures-tokens",
    seed="#34870",
    breaks="UnifiedRadixCache.checkpoint_into_tree frees a chunk's out-of-window SWA slots against the token "
    "count (effective_cache_len - 1) instead of the key length (len(radix_key) - 1): on an EAGLE tree (bigram keys, "
    "is_eagle) the insert stops at page_floor(seq_len - 1), a page lower at page multiples, below a frontier "
    "sized for page_floor(seq_len); raw keys are unaffected (both cores)",
    user_sees="with EAGLE speculative decoding, the leaf a checkpoint inserts keeps less than a window of live "
    "SWA KV: a match can never end on it, and SGLang before 0.5.23 (its rematch after the insert) then freed KV "
    "the tree owned as duplicates (`pool memory leak detected` on every TP rank)",
    invariant="matches: the leaf a checkpoint inserts ends a match (its last W - 1 tokens hold live SWA KV)",
    edits=(SourceEdit("sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache.checkpoint_into_tree",
                      "comp.free_out_of_window_slots(req, len(radix_key) - 1, insert_params)",
                      "comp.free_out_of_window_slots(req, effective_cache_len - 1, insert_params)"),),
)
