"""#24138 review: the SWA write loc is read from pool state set by an earlier batch."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-set-kv-buffer-stale-swa-loc",
    seed="#24138 (review)",
    breaks="SWAKVPool.set_kv_buffer keeps the first SWA write loc it sees as pool state and reuses it for "
    "every later write of the same length, instead of the loc the batch passed in its KVWriteLoc",
    user_sees="a batch with as many new tokens as an earlier one writes its sliding-layer K/V at the earlier "
    "batch's SWA slots: silent, no shape error",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.swa_memory_pool.SWAKVPool.set_kv_buffer",
            "loc = swa_loc",
            "kept = self.__dict__.setdefault('_swa_loc_state', swa_loc)\n"
            "loc = kept if kept.shape == swa_loc.shape else swa_loc",
        ),
    ),
)
