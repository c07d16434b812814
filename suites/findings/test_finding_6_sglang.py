"""FINDINGS #6: SGLang's Gemma2 model reads ``config.hidden_act``, which transformers' ``Gemma2Config`` does not define,
so a checkpoint as transformers writes it does not load. The scene (``docs/repro/finding_6_sglang_gemma2_hidden_act.py``)
loads a tiny Gemma2 checkpoint through SGLang's model loader; it must run SGLang's CPU engine, chosen before SGLang is
imported, so it runs as the script in a process of its own and this test reads its verdict."""

from __future__ import annotations

import pytest

from suites.findings.conftest import reproduce


@pytest.mark.finding(6)
def test_a_gemma2_checkpoint_transformers_wrote_loads():
    verdict = reproduce(6)
    assert not verdict.bug_present, verdict.message
