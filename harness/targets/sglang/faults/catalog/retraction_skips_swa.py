"""A request brought back from host memory gets its full-attention K/V back, not its window's."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-retraction-skips-swa",
    seed="no seed PR: the hazard every method of a hybrid pool carries, delegating to the full sub-pool alone",
    breaks="SWAKVPool.load_cpu_copy loads the full sub-pool's host copy and skips the sliding-window sub-pool's",
    user_sees="a request retracted under memory pressure resumes with whatever its new SWA slots held: its "
    "sliding layers read another request's keys, and its continuation changes silently",
    invariant="1: a request's K/V are its own whatever path they took",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.swa_memory_pool.SWAKVPool.load_cpu_copy",
            "self.swa_kv_pool.load_cpu_copy(swa_kv_cpu, swa_indices)",
            "pass",
        ),
    ),
)
