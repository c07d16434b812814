"""Under asynchronous scheduling the window sweep counts tokens still in flight as processed (#47728).

Upstream: with ``--async-scheduling`` the scheduler schedules step n + 1 while step n runs, and advances
``num_computed_tokens`` when it schedules a step, so that count includes tokens whose attention is still running.
``allocate_slots`` swept the sliding window on that count: the block whose last position the in-flight token's window
still reads (window 128, block 32: the step computing position 158 reads position 31, and the sweep at 159 freed block
0) went back to the pool and could be handed to another request or a KV load while the step read it, silent KV
corruption. #47728 sweeps on the processed basis, ``num_computed_tokens - num_in_flight_tokens``.

On 0.32.0 that is ``KVCacheManager.allocate_slots``'s ``max(0, total_computed_tokens - request.num_in_flight_tokens)``;
the edit sweeps at ``total_computed_tokens``, the state before #47728.
"""

from harness.targets.vllm.faults import SourceEdit, VLLMFault

FAULT = VLLMFault(
    id="vllm-async-sweep-counts-in-flight-tokens",
    seed="#47728",
    breaks="KVCacheManager.allocate_slots sweeps the sliding window (remove_skipped_blocks) at the scheduled count "
    "num_computed_tokens, in-flight tokens included, instead of num_computed_tokens - num_in_flight_tokens",
    user_sees="with --async-scheduling, a sliding-window block that a running step's attention still reads is freed "
    "one step early and handed to another request or a KV connector load: silent garbage in the outputs of "
    "sliding-window models under load",
    invariant="5: the sliding table frees exactly what left the window of every token a running step still reads",
    edits=(
        SourceEdit(
            "vllm.v1.core.kv_cache_manager.KVCacheManager.allocate_slots",
            "max(0, total_computed_tokens - request.num_in_flight_tokens),",
            "total_computed_tokens,  # (#47728) the in-flight tokens counted as processed",
        ),
    ),
)
