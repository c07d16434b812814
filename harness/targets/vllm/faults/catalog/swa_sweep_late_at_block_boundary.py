"""The window sweep returns early when exactly one block has left the window (#23480).

Upstream: #23480 proposed an early exit for ``SlidingWindowManager.remove_skipped_blocks``, ``if last_useful_token <=
self.block_size: return`` (``last_useful_token = num_computed_tokens - sliding_window + 1``, the count of tokens that
left the window), to skip the work when no whole block had left. The review flagged it as critical: at exactly
``block_size`` skipped tokens block 0 has left the window and must be freed, and the exit keeps it. The PR was
closed; the merged early exit (#27673) tests ``<= 0`` and lets the block division decide.

On 0.32.0 the count is ``get_num_skipped_tokens`` and the early exit is ``remove_skipped_blocks``'s ``if
num_skipped_tokens <= 0``. The edit makes it ``<= self.block_size``, #23480's bound: a sweep at the exact count where
the window's tail crosses the first block boundary (``num_computed_tokens == window - 1 + block_size``) keeps block 0,
which is freed only by a later sweep, and not at all if the request finishes first.
"""

from harness.targets.vllm.faults import SourceEdit, VLLMFault

FAULT = VLLMFault(
    id="vllm-swa-sweep-late-at-block-boundary",
    seed="#23480 (closed: its early exit was flagged critical in review)",
    breaks="SingleTypeKVCacheManager.remove_skipped_blocks returns early while at most one block's worth of tokens "
    "has left the window (num_skipped_tokens <= block_size), so the sweep at exactly block_size skipped tokens keeps "
    "the block that just left",
    user_sees="sliding-window layers hold one block more than the window needs at that step; the pool reports fewer "
    "free blocks than it has, and admission and preemption decide on the wrong count",
    invariant="5: the sliding table frees exactly what left the window, at the window's exact boundary",
    edits=(
        SourceEdit(
            "vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager.remove_skipped_blocks",
            "if num_skipped_tokens <= 0:",
            "if num_skipped_tokens <= self.block_size:  # (#23480) keeps the block that just left at the boundary",
        ),
    ),
)
