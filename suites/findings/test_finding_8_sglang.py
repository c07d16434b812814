"""FINDINGS #8: SGLang's ``SWATokenToKVPoolAllocator.alloc_decode`` takes the full pool's page before it finds the SWA
pool short, and keeps it. The scene is ``docs/repro/finding_8_sglang_decode_loses_a_page.py``'s (SGLang's own pool and
allocator, nothing else); this test holds it to the contract ``alloc_extend`` keeps: a refused decode takes nothing."""

from __future__ import annotations

import pytest

from suites.findings.conftest import load_script, reproduce, require_pinned


@pytest.mark.finding(8)
def test_a_decode_that_does_not_fit_takes_nothing():
    verdict = reproduce(8)
    assert not verdict.bug_present, verdict.message


def test_the_reproducer_passes_once_a_refused_decode_takes_nothing(monkeypatch):
    """The control: with the fix FINDINGS #8 proposes (check both pools' pages before either allocator moves, as
    ``alloc_extend`` does) applied as a monkeypatch, the same scene passes."""
    found = require_pinned(8)
    from harness.targets.sglang.imports import import_sglang

    import_sglang(any_version=True)
    from sglang.srt.mem_cache.allocator.paged import get_num_new_pages
    from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator

    original = SWATokenToKVPoolAllocator.alloc_decode

    def checked_first(self, seq_lens, seq_lens_cpu, last_loc):
        pages = get_num_new_pages(seq_lens=seq_lens_cpu, page_size=self.page_size, decode=True)
        if not self.new_pages_available(pages, pages):
            return None
        return original(self, seq_lens, seq_lens_cpu, last_loc)

    monkeypatch.setattr(SWATokenToKVPoolAllocator, "alloc_decode", checked_first)
    verdict = load_script(found).reproduce()
    assert not verdict.bug_present, f"with both pools checked first: {verdict.message}"
