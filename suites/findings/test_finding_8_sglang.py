"""FINDINGS #8: SGLang's ``SWATokenToKVPoolAllocator.alloc_decode`` takes the full pool's page before it finds the SWA
pool short, and keeps it. The scene is ``docs/repro/finding_8_sglang_decode_loses_a_page.py``'s (SGLang's own pool and
allocator, nothing else); this test holds it to the contract ``alloc_extend`` keeps: a refused decode takes nothing."""

from __future__ import annotations

import pytest

from suites.findings.conftest import reproduce


@pytest.mark.finding(8)
def test_a_decode_that_does_not_fit_takes_nothing():
    verdict = reproduce(8)
    assert not verdict.bug_present, verdict.message
