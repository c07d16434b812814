"""FINDINGS #14: with the overlap scheduler and no prefix sharing (``--disable-radix-cache``), SGLang's
``ScheduleBatch.maybe_evict_swa`` (every release from 0.5.11 to 0.5.23) frees a chunked request's SWA slots only up to
``pre_len - chunked_prefill_size``, as if the chunk in flight were always a full one, so after a shrunk chunk it keeps
SWA KV that no query reads. The scene is ``docs/repro/finding_14_sglang_overlap_chunk_keeps_swa.py``'s (SGLang's own
pool, allocator, request, cache and ``ScheduleBatch``, called in its scheduler's order: ``SWAChunkCache`` at page size
1 up to 0.5.21, ``UnifiedRadixCache(disable=True)`` at page size 4 from 0.5.22); this test holds it to what a window
needs: after each eviction a request holds at most the window below the chunk in flight plus that chunk. The controls
(on the pinned release) show the check is not vacuous: full chunks and the non-overlap path meet it on 0.5.23, and so
do shrunk chunks once the frontier is the real start of the chunk in flight (the change of kvcache-ai/sglang#75)."""

from __future__ import annotations

import pytest

from suites.findings.conftest import load_script, reproduce, require_pinned


@pytest.mark.finding(14)
def test_an_overlap_chunk_keeps_only_the_window_below_the_chunk_in_flight():
    verdict = reproduce(14)
    assert not verdict.bug_present, verdict.message


def _scene():
    found = require_pinned(14)
    from harness.targets.sglang.imports import import_sglang

    import_sglang(any_version=True)
    return load_script(found)


def test_full_chunks_keep_only_the_window_below_the_chunk_in_flight():
    """The control: where every chunk is ``chunked_prefill_size`` long, 0.5.23's frontier is the chunk's start."""
    scene = _scene()
    size = scene.CHUNKED_PREFILL_SIZE
    passes = scene.prefill((size,) * 4)
    verdict = scene.judge(passes)
    assert not verdict.bug_present, f"full chunks: {verdict.message}"
    assert [p.held for p in passes[2:]] == [scene.WINDOW + size] * 2, verdict.message


def test_without_overlap_shrunk_chunks_keep_only_the_window():
    """The control: without the overlap scheduler the frontier is the prefix itself, whatever the chunks."""
    scene = _scene()
    verdict = scene.judge(scene.prefill(overlap=False))
    assert not verdict.bug_present, f"no overlap: {verdict.message}"


def test_the_reproducer_passes_once_the_frontier_is_the_start_of_the_chunk_in_flight(monkeypatch):
    """The control: with the frontier at the recorded start of the previous extend (what kvcache-ai/sglang#75 does)
    applied as a monkeypatch to the overlap extend branch, the same scene passes."""
    scene = _scene()
    from sglang.srt.managers.schedule_batch import ScheduleBatch

    original = ScheduleBatch.maybe_evict_swa
    started: dict[str, int] = {}  # rid: where its last scheduled extend began

    def at_the_chunk_in_flight(self):
        cache = self.tree_cache
        if not (
            self.forward_mode.is_extend()
            and self.enable_overlap
            and cache.supports_swa()
            and not cache.supports_prefix_sharing()
        ):
            return original(self)
        self.token_to_kv_pool_allocator.free_group_begin()
        for idx, req in enumerate(self.reqs):
            if req.extend_batch_idx >= 2:
                self._evict_swa(req, started[req.rid])
            started[req.rid] = self.prefix_lens[idx]
        self.token_to_kv_pool_allocator.free_group_end()

    monkeypatch.setattr(ScheduleBatch, "maybe_evict_swa", at_the_chunk_in_flight)
    verdict = scene.reproduce()
    assert not verdict.bug_present, f"with the frontier at the chunk in flight: {verdict.message}"
