"""EAGLE's last-block drop takes a block the sliding window's prefix-cache hit needs (#17398).

Upstream: #17137 made a prefix-cache hit drop its last matched block when EAGLE is on (the drafter needs that block's
hidden states recomputed). For a sliding-window group that is wrong: a hit there is a run of
``cdiv(window - 1, block_size)`` contiguous cached blocks ending at the hit, the rest nulls, and dropping the last one
leaves the next token's window without a block (window 4, block 2: ``[NULL, NULL, A, B]`` became ``[NULL, NULL, A]``,
whose next token needs positions 3-5). #17398 moved the drop into the managers: the sliding-window manager asks for
one more contiguous block than the window needs, then drops it.

On 0.32.0 that extra block is ``SlidingWindowManager._contiguous_blocks_for_hit``'s ``blocks += 1`` under
``use_eagle``; the drop itself is still in ``find_longest_cache_hit``. The edit removes the extra block and keeps the
drop, which is the state between #17137 and #17398: with EAGLE on, every sliding-window hit ends with its window's
first block missing (a null block where real KV must be).
"""

from harness.targets.vllm.faults import SourceEdit, VLLMFault

FAULT = VLLMFault(
    id="vllm-swa-eagle-hit-drops-window-block",
    seed="#17398 (fixing #17137)",
    breaks="SlidingWindowManager._contiguous_blocks_for_hit no longer asks for one more contiguous cached block when "
    "EAGLE is on, while find_longest_cache_hit still drops the last matched one",
    user_sees="with EAGLE speculative decoding and prefix caching, a request that hits the cache attends, in its "
    "sliding-window layers, over the null block where the window's first block should be: wrong outputs after "
    "every prefix-cache hit",
    invariant="5: the sliding table frees exactly what left the window (after a hit, every block the next token's "
    "window reaches is real)",
    edits=(
        SourceEdit(
            "vllm.v1.core.single_type_kv_cache_manager.SlidingWindowManager._contiguous_blocks_for_hit",
            "blocks += 1",
            "pass  # (#17137) the EAGLE drop below takes a block the window needs",
        ),
    ),
)
