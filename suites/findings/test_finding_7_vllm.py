"""FINDINGS #7: vLLM's transformers backend adds ``num_nextn_predict_layers`` to the layer count without treating
None as absent, so a Mellum checkpoint whose config says ``null`` does not load. The scene
(``docs/repro/finding_7_vllm_mellum_mtp_none.py``) builds vLLM's model for a tiny Mellum checkpoint through its model
loader in a one-process gloo group, so it runs as the script in a process of its own and this test reads its verdict."""

from __future__ import annotations

import pytest

from suites.findings.conftest import reproduce


@pytest.mark.finding(7)
def test_a_mellum_checkpoint_without_mtp_layers_loads():
    verdict = reproduce(7)
    assert not verdict.bug_present, verdict.message
