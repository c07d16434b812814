"""Every SGLang-side fault still applies to the installed SGLang's source and changes it, restores
cleanly, and an edit whose text is gone fails loudly instead of becoming a silent no-op."""

from __future__ import annotations

import pytest

from harness.targets.sglang.faults import SGLangFault, SourceEdit, inject, resolve, source_of
from harness.targets.sglang.faults.by_id import SGLANG_FAULTS


@pytest.fixture(scope="module")
def installed(target):
    if target.name != "sglang":
        pytest.skip("patches real SGLang source: run with --target sglang (nox -s sglang)")
    return target


def _code(edit: SourceEdit):
    fn = resolve(edit.target)
    return getattr(fn, "__func__", fn).__code__


@pytest.mark.parametrize("fault_id", list(SGLANG_FAULTS))
def test_each_fault_applies_differs_and_restores(installed, fault_id):
    fault = SGLANG_FAULTS[fault_id]
    for edit in fault.edits:
        assert edit.match.splitlines()[0].strip() in source_of(edit.target), (
            f"{edit.target} no longer holds {edit.match!r}"
        )
    clean = {e.target: _code(e) for e in fault.edits}
    with inject(fault):
        assert all(_code(e) is not clean[e.target] for e in fault.edits), "the fault left SGLang's code unchanged"
    assert all(_code(e) is clean[e.target] for e in fault.edits), "the clean code was not restored"


def test_an_edit_whose_text_moved_fails_loudly(installed):
    from sglang.srt.debug_utils.source_patcher.types import PatchApplicationError

    gone = SGLangFault(
        "moved",
        seed="#0",
        breaks="",
        user_sees="",
        invariant="",
        edits=(
            SourceEdit("sglang.srt.mem_cache.kv_loc_plan.pad_with_sink", "this line is not in the function", "pass"),
        ),
    )
    clean = resolve("sglang.srt.mem_cache.kv_loc_plan.pad_with_sink").__code__
    with pytest.raises(PatchApplicationError):
        with inject(gone):
            pass
    assert resolve("sglang.srt.mem_cache.kv_loc_plan.pad_with_sink").__code__ is clean
