"""The sliding window's write-side cache mask skips the block past each aligned boundary that EAGLE's lookup needs
(#44082).

Upstream: #42258 made ``SlidingWindowManager`` cache only the blocks a prefix-cache hit can use (the run of
``cdiv(window - 1, block_size)`` blocks ending at each cache-hit-aligned boundary). With EAGLE the lookup drops the
last matched block, so it asks for one block more, and the run it needs ends one block *past* the boundary. When the
alignment (the LCM of the groups' block sizes) is larger than the window, that block is exactly one the mask left out:
EAGLE + sliding window found no hit at all, silently (0 % hit rate, #42784's report). #44082 shifts the run's right
edge past the boundary under EAGLE (``shift``) and sizes it with EAGLE's extra block (``_contiguous_blocks_for_hit``).

On 0.32.0 the shift is ``reachable_block_mask``'s ``shift = 1 if use_eagle else 0``; the edit makes it 0, the run's
right edge on the last block before the boundary as in #42258.
"""

from harness.targets.vllm.faults import SourceEdit, VLLMFault

FAULT = VLLMFault(
    id="vllm-swa-mask-skips-eagle-lookahead-block",
    seed="#44082 (fixing #42258)",
    breaks="SlidingWindowManager.reachable_block_mask ends every cached run on the last block before the aligned "
    "boundary even under EAGLE, whose lookup needs the run to end one block past it",
    user_sees="with EAGLE / MTP speculative decoding, prefix caching and a cache-hit alignment larger than the "
    "window (hybrid models with different block sizes), the sliding group never finds a hit and the coordinator "
    "cuts every hit to 0: every prompt is recomputed, no error, the hit rate just reads 0 %",
    invariant="hit counts: a prompt that extends a cached one hits it, at every alignment, EAGLE on or off",
    edits=(
        SourceEdit(
            "vllm.v1.core.single_type_kv_cache_manager.SlidingWindowManager.reachable_block_mask",
            "shift = 1 if use_eagle else 0",
            "shift = 0  # (#42258) the run ends before the boundary, EAGLE or not",
        ),
    ),
)
