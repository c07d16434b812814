"""The decode registry pads seq_lens with 0 instead of the attention backend's fill value."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

_REGISTRY = "sglang.srt.model_executor.cuda_graph_buffer_registry.build_decode_registry"

FAULT = SGLangFault(
    id="sglang-seq-lens-padded-with-zero",
    seed="#24743 (padding policy table)",
    breaks="seq_lens and seq_lens_cpu of padded rows are filled with 0, not seq_len_fill_value",
    user_sees="padded rows attend over zero keys: an empty softmax (NaN) or a kernel reading out of bounds, "
    "in every graph replay with raw_bs < bs",
    invariant="2: padded rows are harmless (they attend over exactly the padding slot)",
    edits=(
        SourceEdit(
            _REGISTRY,
            '"seq_lens",\n_bs,\ntorch.int64,\naxis="bs",\npadding_policy=PaddingPolicy.FILL_SENTINEL,\n'
            "pad_value=seq_len_fill_value,",
            '"seq_lens",\n_bs,\ntorch.int64,\naxis="bs",\npadding_policy=PaddingPolicy.FILL_SENTINEL,\npad_value=0,',
        ),
        SourceEdit(
            _REGISTRY,
            'device=torch.device("cpu"),\npadding_policy=PaddingPolicy.FILL_SENTINEL,\npad_value=seq_len_fill_value,',
            'device=torch.device("cpu"),\npadding_policy=PaddingPolicy.FILL_SENTINEL,\npad_value=0,',
        ),
    ),
)
