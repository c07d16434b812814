"""A ragged verify's sink lanes take the window's first token instead of the sink."""

from harness.targets.sglang.faults import SGLangFault, SourceEdit

FAULT = SGLangFault(
    id="sglang-ragged-verify-sink-lanes-not-sunk",
    seed="#24743's hazard (padded lanes write into live slots), at speculative widths",
    breaks="KVLocPlan._cols maps a flat column index of -1 (a sink lane of a packed ragged verify) to index 0 of "
    "the window (cols.clamp(min=0)) without replacing it with the sink",
    user_sees="every sink lane of a ragged verify writes its garbage K/V into the first request's first draft "
    "token, in both pools; the request's next read of that token sees another lane's keys",
    invariant="2: padded rows write only to the sentinel slot",
    edits=(
        SourceEdit(
            "sglang.srt.mem_cache.kv_loc_plan.KVLocPlan._cols",
            "return torch.where(cols >= 0, ids[cols.clamp(min=0)], 0)",
            "return ids[cols.clamp(min=0)]",
        ),
    ),
)
