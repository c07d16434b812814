"""The sliding window's cache mask keeps a run one block shorter than EAGLE's lookup needs (#44082, its other half).

Upstream: #44082 fixed the write-side mask of #42258 in two places that must agree with the lookup: the run's right
edge moves one block past the aligned boundary under EAGLE, and the run's length comes from the lookup's own
``_contiguous_blocks_for_hit`` (the window's blocks plus EAGLE's dropped one), shared so the two cannot drift. A
backport that takes the shift and misses the length (1CatAI/1Cat-vLLM#205 reports doing exactly that: the fix spans
two methods) keeps ``cdiv(window - 1, block_size)`` blocks ending past the boundary: the run EAGLE needs is one block
longer, its first block is never cached, and the hit is lost again.

On 0.32.0 the length is ``reachable_block_mask``'s ``need = _contiguous_blocks_for_hit(..., use_eagle=use_eagle)``;
the edit asks it without EAGLE's block.
"""

from harness.targets.vllm.faults import SourceEdit, VLLMFault

FAULT = VLLMFault(
    id="vllm-swa-mask-run-short-of-eagle-block",
    seed="#44082 (the run length half; 1CatAI/1Cat-vLLM#205's partial backport)",
    breaks="SlidingWindowManager.reachable_block_mask sizes each cached run as the window's blocks only, one block "
    "short of the run find_longest_cache_hit asks for under EAGLE (it drops the last matched block)",
    user_sees="with EAGLE / MTP and prefix caching on a hybrid model whose cache-hit alignment is larger than the "
    "window, sliding-window hits are lost (0 or far fewer hit tokens) while answers stay the same: only latency and "
    "the hit-rate metric show it",
    invariant="hit counts: a prompt that extends a cached one hits it, at every alignment, EAGLE on or off",
    edits=(
        SourceEdit(
            "vllm.v1.core.single_type_kv_cache_manager.SlidingWindowManager.reachable_block_mask",
            "use_eagle=use_eagle,",
            "use_eagle=False,  # (#44082's other half) the run without EAGLE's extra block",
        ),
    ),
)
