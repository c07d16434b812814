"""FINDINGS #12: SGLang 0.5.22's ``UnifiedRadixCache.checkpoint`` leaves a prefill chunk's pages in the tree with no
lock on them where the window is not a multiple of the page size, so an eviction hands them to another request while
the running one still reads them. The scene is ``docs/repro/finding_12_sglang_chunk_checkpoint_unlocks.py``'s (SGLang's
own pool, allocator, request and radix cache, called in its scheduler's order); this test holds it to the contract a
checkpoint keeps: what the tree took from a running request stays locked until the request lets it go. Fixed in
0.5.23, the pinned release, where this test guards the fix (harness/findings.py)."""

from __future__ import annotations

import pytest

from suites.findings.conftest import reproduce


@pytest.mark.finding(12)
def test_a_chunk_checkpoint_keeps_the_running_requests_slots_locked():
    verdict = reproduce(12)
    assert not verdict.bug_present, verdict.message
