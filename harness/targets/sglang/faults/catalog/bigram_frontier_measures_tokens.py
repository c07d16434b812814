"""EAGLE's bigram key is one shorter than its tokens, but the checkpoint's SWA frontier is measured on the tokens."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-bigram-frontier-measures-tokens",
    seed="#34870",
    breaks="UnifiedRadixCache.checkpoint_into_tree sizes a chunk's out-of-window SWA frontier on the token count "
    "(pre_len = effective_cache_len) instead of the key (len(radix_key) - 1): a raw key keeps exactly a window "
    "below its insert boundary page_floor(seq_len), but on an EAGLE tree (bigram keys, is_eagle) the insert stops at "
    "page_floor(seq_len - 1), a page lower at page multiples, and the leaf keeps a page less than the window "
    "(both cores)",
    user_sees="with EAGLE speculative decoding, the leaf a checkpoint inserts keeps less than a window of live "
    "SWA KV: a match can never end on it, and SGLang before 0.5.23 (its rematch after the insert) then freed KV "
    "the tree owned as duplicates (`pool memory leak detected` on every TP rank)",
    invariant="matches: the leaf a checkpoint inserts ends a match (its last W - 1 tokens hold live SWA KV)",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache.checkpoint_into_tree",
            "comp.free_out_of_window_slots(req, len(radix_key) - 1, insert_params)",
            "comp.free_out_of_window_slots(req, effective_cache_len, insert_params)",
        ),
    ),
)
