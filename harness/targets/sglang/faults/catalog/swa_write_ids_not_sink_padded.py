"""#24743 at the KV-loc plan: SWA write ids of padded lanes are not the sink."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-swa-write-ids-not-sink-padded",
    seed="#24743",
    breaks="kv_loc_plan.pad_with_sink pads the SWA write ids of a padded batch with the last live id instead "
    "of the sink slot 0",
    user_sees="every padded row writes its K/V into the last live request's SWA slot: silent corruption",
    invariant="2: padded rows write only to the sentinel slot",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.kv_loc_plan.pad_with_sink", "padded = ids.new_zeros(n)", "padded = ids[-1:].repeat(n)"
        ),
    ),
)
