"""A sliding MLA layer writes its latent rows at the token's full id."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-mla-swa-write-at-full-id",
    seed="#24138's hazard (an id of one sub-pool used in the other's space), in the MLA write path",
    breaks="SWAKVPool.set_mla_kv_buffer no longer swaps in the pre-translated swa_loc for sliding layers: their "
    "latent rows are written to the SWA sub-pool at the full ids",
    user_sees="on an MLA model with sliding layers (the DeepSeek family's hybrid SWA), a sliding layer's keys "
    "land in SWA slots owned by other tokens or requests; its reads, at the SWA ids, see stale rows",
    invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
    edits=(SourceEdit("sglang.srt.mem_cache.swa_memory_pool.SWAKVPool.set_mla_kv_buffer", "loc = swa_loc", "pass"),),
)
