"""Fixtures shared by the scenario and differential suites: the target, engines, invariant watchers."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import _disable_current_modes

from harness.env import HYPOTHESIS_ENV
from harness.targets.target import Target, load_target
from harness.mem import STALE_KEY_WARNING, SWAKVPool
from suites.checks import expect_structure
from suites.known_failures import pytest_runtest_makereport  # noqa: F401 - every strict xfail names its failure
from suites.pinned_skips import PinnedSkips

# Small limits: buckets 1..32, two KV-length buckets (64, 128), chunked prefill on every prompt of note.
ENGINE_LIMITS = dict(max_running_requests=32, chunk_size=16, max_prefill_tokens=64, max_context_len=128)
# The checkpoints this repo trains and ships (fixtures/models): two hybrid layouts, Gemma2 1:1 and Gemma3 5:1.
TRAINED_CHECKPOINTS = {
    name: Path(__file__).resolve().parent.parent / "fixtures" / "models" / name
    for name in ("gemma2-tiny-swa", "gemma3-tiny-swa")
}
EXHAUSTIVE = os.environ.get(HYPOTHESIS_ENV) == "exhaustive"


def examples(default: int) -> int:
    """Hypothesis examples for an engine-level property: few by default, many when exhaustive."""
    return default * 25 if EXHAUSTIVE else default


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--target", default=None, help="implementation under test (default: harness)")


def pytest_configure(config: pytest.Config) -> None:
    """No silent skip on a pinned SGLang or vLLM release (suites/pinned_skips.py, its table suites/expected_skips.py)."""
    config.pluginmanager.register(PinnedSkips.here(), "swa-harness-pinned-skips")


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest) -> Target:
    return load_target(request.config.getoption("--target"))


class StaleKeyWatch(logging.Handler):
    """Collects the memo's 'loc tensor changed without invalidation' warnings (invariant 6)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if STALE_KEY_WARNING in message:
            self.messages.append(message)


@pytest.fixture
def stale_key_watch() -> Iterator[StaleKeyWatch]:
    watch = StaleKeyWatch()
    logger = logging.getLogger("harness.mem.loc_memo")
    logger.addHandler(watch)
    try:
        yield watch
    finally:
        logger.removeHandler(watch)


@pytest.fixture
def swa_write_spy(monkeypatch: pytest.MonkeyPatch, target: Target) -> list[int]:
    """Invariant 3 at the write boundary: every SWA write Python performs (eager forwards, warm-up and
    capture runs) uses exactly the current mapping of the written tokens' full slots.

    The check runs outside any dispatch mode, so inside a tape capture it is neither recorded nor
    refused as a host sync; it never translates ahead of the pool, so the memo's behaviour is the
    pool's own.
    """
    original = target.pool_class.set_kv_buffer
    checked: list[int] = []

    def check(pool: SWAKVPool, layer_id: int, loc: torch.Tensor, used: torch.Tensor) -> None:
        with _disable_current_modes():
            expect_structure(
                used.dtype in target.index_dtypes,  # invariant 4, before the pool's own contract check
                f"layer {layer_id}: SWA write ids of dtype {used.dtype}; the pool declares "
                f"{[str(d) for d in target.index_dtypes]}",
            )
            expected = pool.full_to_swa_index_mapping[loc]
            assert used.numel() == expected.numel() and torch.equal(used.to(expected.dtype), expected), (
                f"layer {layer_id}: SWA slots used {used.tolist()[:8]} (n={used.numel()}) != current mapping "
                f"{expected.tolist()[:8]} (n={expected.numel()}) of the written full slots"
            )
        checked.append(layer_id)

    def checked_set_kv_buffer(self, layer_id, loc, k, v, *, swa_loc=None):
        is_swa = self.is_swa_layer(layer_id)
        if is_swa and swa_loc is not None:
            check(self, layer_id, loc, swa_loc)
        result = original(self, layer_id, loc, k, v, swa_loc=swa_loc)
        if is_swa and swa_loc is None:
            with _disable_current_modes():
                used = self.translate_loc_from_full_to_swa(loc)  # the memo entry the write just used
            check(self, layer_id, loc, used)
        return result

    monkeypatch.setattr(target.pool_class, "set_kv_buffer", checked_set_kv_buffer)
    return checked


@pytest.fixture
def free_swa_watch(monkeypatch: pytest.MonkeyPatch, target: Target) -> list[int]:
    """Invariant 3 at the window's free boundary: once ``free_swa`` has given a token's SWA slot back, the token
    translates to the padding slot 0, in every pool the target builds while the test runs. Checked right after the
    call, so a mapping left pointing at freed slots fails here, before a later free hands them back twice."""
    build = target.build_pool
    freed: list[int] = []

    def watched_build(spec):
        handle = build(spec)
        allocator, free_swa = handle.allocator, handle.allocator.free_swa

        def checked_free_swa(free_index: torch.Tensor) -> None:
            free_swa(free_index)
            with _disable_current_modes():
                still = allocator.full_to_swa_index_mapping[free_index.long()]
                assert not still.any(), (
                    f"free_swa({free_index.tolist()[:8]}): those tokens still map to SWA slots "
                    f"{still.tolist()[:8]}, which are free again"
                )
            freed.append(free_index.numel())

        allocator.free_swa = checked_free_swa
        return handle

    monkeypatch.setattr(target, "build_pool", watched_build)
    return freed
