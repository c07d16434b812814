"""The capability skips expected on the pinned SGLang and vLLM releases (``harness/findings.py`` ``PINNED``), each with
why: the one table ``suites/pinned_skips.py`` reads.

On a pinned release a capability skip (``NotOnThisSGLang`` or ``NotOnThisVLLM``: the release lacks what a test drives,
imports a package with no CPU build, or runs it only as a Triton kernel, "CPU-unreachable"; or a finding's scene that
cannot be set up) fails its test unless a row here expects it, and a row whose test ran without that skip fails the
session: the pinned release is the one CI vouches for, so a skip there is a claim someone wrote down. Other releases
keep their skips, which the release matrices show as "n/a".

A row names the engine, the test (a node id, or the start of some: a file, ``file::Class``, or ``file::test`` for
every parameter of it), a part of the skip reason that stays the same across releases ("lacks
UnifiedRadixCache.evict_swa", not the version in front of it), and why the pinned release cannot run the test.

The rows come from a run of ``nox -s sglang`` (and ``nox -s vllm``) on the pinned release: each capability skip not
listed fails there, and the run's summary section "skips on a pinned release, not in suites/expected_skips.py" prints
it as a row to paste, its ``why`` left for whoever pastes it to write (an empty ``why`` fails the session).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.targets.releases import TargetEngine


@dataclass(frozen=True)
class ExpectedSkip:
    """A capability skip the pinned release of ``engine`` is expected to make, and why."""

    engine: TargetEngine
    test: str  # a node id, or the start of some ("suites/sglang/test_swa_pool_layouts.py::test_mla")
    reason: str  # a part of the skip reason without the version ("lacks UnifiedRadixCache.evict_swa")
    why: str  # why the pinned release cannot run the test, in one line

    @property
    def file(self) -> str:
        return self.test.split("::", 1)[0]

    def matches(self, engine: TargetEngine, nodeid: str, reason: str) -> bool:
        """Whether this row expects ``engine``'s skip of test ``nodeid`` for ``reason``."""
        return engine == self.engine and self.covers(nodeid) and self.reason in reason

    def covers(self, nodeid: str) -> bool:
        """Whether ``nodeid`` is the row's test, or one of those it starts (a file, a class, every parameter)."""
        return nodeid == self.test or nodeid.startswith((f"{self.test}::", f"{self.test}["))


EXPECTED_SKIPS: tuple[ExpectedSkip, ...] = (
    ExpectedSkip(
        "sglang",
        "suites/sglang/test_seed_replay.py::test_a_padded_replay_writes_no_live_requests_swa_slot",
        "lacks sglang.srt.model_executor.cuda_graph_runner.DecodeInputBuffers",
        why="replays #24743's seed in the decode buffers it patched; 0.5.23 pads through the buffer registry "
        "instead (suites/sglang/test_decode_registry.py holds that), so the seed's class is gone",
    ),
)
