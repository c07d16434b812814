"""#24743 in the piecewise prefill graphs: padded tokens keep the previous replay's write locations."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-prefill-registry-out-cache-loc-not-zeroed",
    seed="#24743, in the prefill (piecewise) graph buffers instead of the decode ones",
    breaks="the prefill buffer registry copies out_cache_loc head-only (FOREACH_COPY) instead of zeroing the "
    "padded tail [raw_num_tokens:padded_num_tokens]",
    user_sees="a prefill run in a larger token bucket writes its padded tokens' K/V at the write locations of "
    "the previous, larger prefill: silent corruption of live requests' KV (the prefill graphs process every "
    "padded token)",
    invariant="2: padded rows write only to the sentinel slot",
    edits=(
        SourceEdit(
            "sglang.srt.model_executor.cuda_graph_buffer_registry.build_prefill_registry",
            'cache_loc_dtype,\naxis="tokens",\npadding_policy=PaddingPolicy.ZERO,',
            'cache_loc_dtype,\naxis="tokens",\npadding_policy=PaddingPolicy.FOREACH_COPY,',
        ),
    ),
)
