"""Connector-loaded tokens get sliding-window blocks whether or not they are in the window (#30166).

Upstream: before #30166 the hybrid manager, given tokens a KV connector had (LMCache, P/D), allocated blocks for all
of them in the sliding-window groups too, as for full attention, and freed the ones outside the window at the next
step. A long prefix from the connector then needed its whole length in sliding-window blocks at once (admission
failures and OOMs), and a P/D connector still copying into blocks the next step freed and reused for another request
raced with it. #30166 (with #25431, which measured the window on all computed tokens) allocates only the blocks
inside the window: the skipped ones are null from the start.

On 0.32.0 both halves read ``get_num_skipped_tokens`` of the local plus external computed tokens:
``add_local_computed_blocks`` pads the skipped blocks with nulls and ``get_num_blocks_to_allocate`` counts only the
rest. The edit measures both on the local prefix-cache hit alone, as before #30166: the blocks of external tokens that
already left the window are allocated (and counted) as real blocks, to be freed one step later.
"""

from harness.targets.vllm.faults import SourceEdit, VLLMFault

_MANAGER = "vllm.v1.core.single_type_kv_cache_manager.SingleTypeKVCacheManager"

FAULT = VLLMFault(
    id="vllm-swa-external-tokens-allocated-outside-window",
    seed="#30166 (with #25431)",
    breaks="SingleTypeKVCacheManager.add_local_computed_blocks and get_num_blocks_to_allocate skip only the tokens "
    "outside the window of the local prefix-cache hit, not of the hit plus the connector's tokens: the sliding-window "
    "group allocates blocks for external tokens that already left the window",
    user_sees="with a KV connector, a request admitted with a long external prefix holds sliding-window blocks for "
    "all of it until its next step: admission needs far more free blocks than the window, long prompts are refused or "
    "preempt others, and a P/D transfer can land in blocks freed and reused meanwhile",
    invariant="5: the sliding table frees exactly what left the window (connector-loaded tokens included)",
    edits=(
        SourceEdit(
            f"{_MANAGER}.add_local_computed_blocks",
            "num_skipped_tokens = self.get_num_skipped_tokens(num_total_computed_tokens)",
            "num_skipped_tokens = self.get_num_skipped_tokens(num_local_computed_tokens)  # (before #30166)",
        ),
        SourceEdit(
            f"{_MANAGER}.get_num_blocks_to_allocate",
            "num_skipped_tokens = self.get_num_skipped_tokens(total_computed_tokens)",
            "num_skipped_tokens = self.get_num_skipped_tokens(num_local_computed_tokens)  # (before #30166)",
        ),
    ),
)
