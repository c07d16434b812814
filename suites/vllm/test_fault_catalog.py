"""Every vLLM-side fault still applies to the installed vLLM's source and changes it, restores cleanly, and an edit
whose text is gone fails loudly, leaving vLLM as it was, instead of becoming a silent no-op."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="patches real vLLM source: run in the `nox -s vllm` venv")

from harness.targets.vllm.faults import SourceEdit, SourcePatchError, VLLMFault, inject, resolve  # noqa: E402
from harness.targets.vllm.faults.by_id import VLLM_FAULTS, vllm_fault_code  # noqa: E402


@pytest.mark.parametrize("fault_id", list(VLLM_FAULTS))
def test_each_fault_applies_differs_and_restores(fault_id):
    fault = VLLM_FAULTS[fault_id]
    targets = vllm_fault_code()[fault_id]
    clean = {t: resolve(t).__code__ for t in targets}
    with inject(fault):
        unchanged = [t for t in targets if resolve(t).__code__ is clean[t]]
        assert not unchanged, f"{fault_id} left {unchanged} as installed"
    assert all(resolve(t).__code__ is clean[t] for t in targets), f"{fault_id}: the installed code was not restored"


def test_an_edit_whose_text_moved_fails_loudly_and_changes_nothing():
    applies = VLLM_FAULTS["vllm-swa-sweep-late-at-block-boundary"].edits[0]
    moved = SourceEdit("vllm.v1.worker.block_table.BlockTable.move_row", "this line is not in the function", "pass")
    fault = VLLMFault("moved", seed="#0", breaks="", user_sees="", invariant="", edits=(applies, moved))
    clean = {e.target: resolve(e.target).__code__ for e in fault.edits}
    with pytest.raises(SourcePatchError, match="BlockTable.move_row: the match 'this line is not in the function'"):
        with inject(fault):
            pass
    assert all(resolve(t).__code__ is code for t, code in clean.items()), "a failed fault left an edit applied"
