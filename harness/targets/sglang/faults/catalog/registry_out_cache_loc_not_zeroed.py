"""#24743 in 0.5.23's padding table: padded rows keep the previous replay's write locations."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

_REGISTRY = "sglang.srt.model_executor.cuda_graph_buffer_registry.build_decode_registry"

FAULT = SGLangFault(
    id="sglang-registry-out-cache-loc-not-zeroed",
    seed="#24743",
    breaks="the decode buffer registry copies out_cache_loc head-only (FOREACH_COPY) instead of zeroing the "
    "padded tail, and the registry's own cross-check against INDEX_SEMANTIC_BUFFERS is edited to match",
    user_sees="padded rows of a graph batch write K/V at the write locations of the previous, larger batch: "
    "silent corruption of live requests' KV",
    invariant="2: padded rows write only to the sentinel slot",
    edits=(
        SourceEdit(
            _REGISTRY,
            'cache_loc_dtype,\naxis="tokens",\npadding_policy=PaddingPolicy.ZERO,',
            'cache_loc_dtype,\naxis="tokens",\npadding_policy=PaddingPolicy.FOREACH_COPY,',
        ),
        SourceEdit(
            _REGISTRY,
            "expected_zero = INDEX_SEMANTIC_BUFFERS & registered",
            'expected_zero = (INDEX_SEMANTIC_BUFFERS - {"out_cache_loc"}) & registered',
        ),
    ),
)
