"""The early release of a prefix's SWA lock sits behind a hasattr guard that is false for the unified cache (#28161)."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-swa-prefix-lock-release-behind-hasattr",
    seed="#28161",
    breaks="UnifiedRadixCache.release_swa_prefix_lock (the decode step's maybe_evict_swa calls it once a request's "
    "window has passed its cached prefix) releases the SWA part of the request's tree lock only "
    "`if hasattr(self, 'dec_swa_lock_only')`: the legacy SWARadixCache's method name, which the unified cache does "
    "not have, so the release silently does nothing, as ScheduleBatch.maybe_evict_swa's guard did before #28161",
    user_sees="a long decode keeps its whole prefix's SWA KV locked until it finishes: the SWA pool cannot reclaim "
    "it, admission and eviction see less room than there is, and on hybrid SWA + Mamba pools the stranded "
    "Full-locked leaves trip the cascade eviction (#28161's crash)",
    invariant="5: accounting; the tree's lock refs follow the window (nothing SWA stays protected for a window "
    "that has moved on)",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.unified_radix_cache.UnifiedRadixCache.release_swa_prefix_lock",
            "and lock.receipt.component_lock_uuids.get(ComponentType.SWA) is not None",
            "and lock.receipt.component_lock_uuids.get(ComponentType.SWA) is not None\n"
            "and hasattr(self, 'dec_swa_lock_only')  # (#28161) the legacy tree's name: false here",
        ),
    ),
)
