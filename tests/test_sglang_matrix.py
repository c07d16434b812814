"""The release matrix's parts without SGLang: cells from a real pytest run's junit XML, the overlay venv's layering,
bisect's search over releases, and the capability checks' skips."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness.env import SGLANG_SOURCE_ENV
from harness.jobs.sglang_matrix import Cell, ReleaseRun, bisect, cells_from_junit, render_markdown
from harness.targets.sglang import capabilities
from harness.targets.sglang.capabilities import UNREACHABLE, NotOnThisSGLang
from harness.targets.sglang.releases import Release, overlay

SUITE_FILES = {
    "mixed/test_mixed.py": """
import pytest
from harness.targets.sglang.capabilities import NotOnThisSGLang
def test_passes(): assert 1 + 1 == 2
def test_fails(): assert [1] == [2], "a wrong answer"
def test_lacks(): raise NotOnThisSGLang("SGLang 9.9 lacks the module sglang.x")
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="a known finding")
def test_known(): assert False
""",
    "absent/test_absent.py": """
from harness.targets.sglang.capabilities import NotOnThisSGLang
def test_unreachable(): raise NotOnThisSGLang("SGLang 9.9's paged alloc_extend launches a Triton kernel: CPU-unreachable")
""",
}


def test_cells_come_from_a_real_pytest_run(tmp_path: Path) -> None:
    for name, text in SUITE_FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    xml = tmp_path / "junit.xml"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "mixed",
            "absent",
            f"--junitxml={xml}",
            "-o",
            "junit_family=xunit1",
        ],
        cwd=tmp_path,
        capture_output=True,
    )
    cells = cells_from_junit(xml, {"mixed": ("mixed",), "absent": ("absent",), "empty": ("nowhere",)})
    assert cells["empty"].status == "failed" and cells["empty"].failed == ["nowhere: no test collected"]
    mixed, absent = cells["mixed"], cells["absent"]
    assert (mixed.status, mixed.passed, mixed.xfailed) == ("failed", 1, 1)
    assert len(mixed.failed) == 1 and "test_fails" in mixed.failed[0] and "a wrong answer" in mixed.failed[0]
    assert mixed.skipped == {"SGLang 9.9 lacks the module sglang.x": 1}
    assert absent.status == "not applicable" and absent.passed == 0 and absent.unreachable == 1


def test_a_skipped_suite_is_never_a_pass() -> None:
    matrix = {
        "command": "swa-harness sglang-matrix",
        "date": "2026-11-27",
        "base": {"torch": "2.13.0", "transformers": "5.19.0"},
        "suites": {"pool": ["suites/pool"]},
        "rows": [
            {
                "release": "9.9",
                "install_s": 1.0,
                "run_s": 2.0,
                "error": "",
                "cells": {
                    "pool": {
                        "status": "not applicable",
                        "passed": 0,
                        "failed": [],
                        "xfailed": 0,
                        "skipped": {"SGLang 9.9 lacks X": 3},
                    }
                },
            }
        ],
    }
    text = render_markdown(matrix)
    assert "| 9.9 | 1.0 | 2.0 | n/a |" in text and "3 skipped: SGLang 9.9 lacks X" in text


def _fake_source(tmp_path: Path, version: str) -> Path:
    tree = tmp_path / "checkout" / "python"
    (tree / "sglang").mkdir(parents=True)
    (tree / "sglang" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    return tree


def test_an_overlay_shadows_only_what_it_holds(tmp_path: Path) -> None:
    """A source-tree overlay: its sglang wins, everything else (pytest here) comes from the base venv, and a second
    call reuses the overlay."""
    release = Release(str(_fake_source(tmp_path, "9.9.9")))
    python = overlay(release, root=tmp_path / "overlays")
    probe = "import sglang, pytest; print(sglang.__version__, pytest.__file__)"
    version, pytest_file = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert version == "9.9.9" and not pytest_file.startswith(str(tmp_path))
    assert overlay(release, root=tmp_path / "overlays") == python and release.label.startswith("source:")


def _row(verdict: str) -> ReleaseRun:
    status = {"good": "passed", "bad": "failed", "skip": "not applicable"}[verdict]
    return ReleaseRun("x", 0.0, 0.0, {"replay": Cell(status, failed=["t: wrong"] if verdict == "bad" else [])})


@pytest.mark.parametrize(
    "good,bad,truth,first_bad",
    [
        (
            "1.0",
            "1.6",
            {"1.0": "good", "1.1": "good", "1.2": "skip", "1.3": "bad", "1.4": "bad", "1.5": "bad", "1.6": "bad"},
            "1.3",
        ),
        (
            "1.6",
            "1.0",
            {"1.0": "bad", "1.1": "bad", "1.2": "skip", "1.3": "skip", "1.4": "good", "1.5": "good", "1.6": "good"},
            "1.1",
        ),
    ],
)
def test_bisect_finds_the_boundary_in_either_direction(good, bad, truth, first_bad) -> None:
    ran: list[str] = []

    def run(release: Release, suites) -> ReleaseRun:
        ran.append(release.spec)
        return _row(truth[release.spec])

    last_good, found, row = bisect(good, bad, {"replay": ()}, candidates=sorted(truth), run=run)
    assert found == first_bad and row.cells["replay"].status == "failed"
    assert truth[last_good] == "good" and len(set(ran)) == len(ran) < len(truth)  # each at most once, not all


def test_bisect_refuses_ends_that_are_not_what_they_are_said_to_be() -> None:
    truth = {"1.0": "good", "1.1": "good"}
    with pytest.raises(ValueError, match="1.1 was given as bad but the suites say good"):
        bisect("1.0", "1.1", {"replay": ()}, candidates=sorted(truth), run=lambda r, s: _row(truth[r.spec]))


def test_only_triton_s_missing_driver_becomes_a_cpu_unreachable_skip() -> None:
    with pytest.raises(NotOnThisSGLang, match=f"paged alloc_extend launches a Triton kernel: {UNREACHABLE}"):
        with capabilities.on_cpu("paged alloc_extend"):
            raise RuntimeError("0 active drivers ([]). There should only be one.")
    with pytest.raises(RuntimeError, match="index out of range"):
        with capabilities.on_cpu("paged alloc_extend"):
            raise RuntimeError("index out of range")


def test_a_missing_method_or_module_is_a_skip_that_names_it() -> None:
    with pytest.raises(NotOnThisSGLang, match="lacks SimpleNamespace.free_segment"):
        capabilities.method(types.SimpleNamespace(), "free_segment")
    with pytest.raises(NotOnThisSGLang, match="lacks the module sglang.srt.mem_cache.kv_loc_plan"):
        capabilities.module("sglang.srt.mem_cache.kv_loc_plan")
    with pytest.raises(NotOnThisSGLang, match="lacks nowhere.A or harness.paths.Nothing"):
        capabilities.first(("nowhere", "A"), ("harness.paths", "Nothing"))


def test_parallel_fields_follow_the_release_s_names() -> None:
    seen = {}

    class Parallel:
        def override(self, **values):
            seen.update(values)

    old = types.SimpleNamespace(_PARALLEL_FIELDS={"dp_size", "attn_tp_size"}, get_parallel=Parallel)
    capabilities.parallel_override(old)(num_dp_ranks=1, attn_tp_size=2)
    assert seen == {"dp_size": 1, "attn_tp_size": 2}


def test_a_rerun_of_a_few_releases_keeps_the_others_in_version_order(tmp_path: Path, monkeypatch) -> None:
    from harness.jobs import sglang_matrix

    def row(release: str, status: str) -> dict:
        return {
            "release": release,
            "install_s": 0.0,
            "run_s": 0.0,
            "error": "",
            "cells": {"replay": {"status": status, "passed": 1, "failed": [], "skipped": {}, "xfailed": 0}},
        }

    out, markdown = tmp_path / "m.json", tmp_path / "m.md"
    out.write_text(
        json.dumps({"rows": [row("0.5.9", "passed"), row("0.5.10", "failed"), row("/src/python", "passed")]})
    )
    monkeypatch.setattr(
        sglang_matrix,
        "run_release",
        lambda release, suites: ReleaseRun(release.label, 0.0, 0.0, {"replay": Cell("passed", passed=2)}),
    )
    code = sglang_matrix.main(
        [
            "--release",
            "0.5.10",
            "--release",
            "0.5.12",
            "--suite",
            "replay",
            "--update",
            "--out",
            str(out),
            "--markdown",
            str(markdown),
        ]
    )
    rows = json.loads(out.read_text())["rows"]
    assert code == 0 and [r["release"] for r in rows] == ["0.5.9", "0.5.10", "0.5.12", "/src/python"]
    assert rows[1]["cells"]["replay"]["passed"] == 2  # the rerun replaced the old row
    markdown.unlink()
    assert sglang_matrix.main(["--render", "--out", str(out), "--markdown", str(markdown)]) == 0
    assert "| 0.5.12 |" in markdown.read_text() and "## How the adapters follow the API" in markdown.read_text()


def test_a_seed_s_release_must_fail_its_replay_and_only_that_release() -> None:
    from harness.jobs.sglang_matrix import unexpected

    def row(release: str, status: str) -> ReleaseRun:
        return ReleaseRun(release, 0.0, 0.0, {"replay": Cell(status), "pool": Cell("not applicable")})

    assert unexpected(row("0.5.11", "failed")) == []  # #24743 shipped there: red is the right answer
    assert unexpected(row("0.5.11", "passed")) == ["replay: passed"]  # a replay that no longer sees the bug
    assert unexpected(row("0.5.12", "failed")) == ["replay: failed"]
    assert unexpected(row("0.5.12", "passed")) == []


def test_a_findings_rerun_keeps_the_other_suites_cells_and_splices_its_section(tmp_path: Path, monkeypatch) -> None:
    from harness.jobs import sglang_matrix

    cell = {"status": "passed", "passed": 1, "failed": [], "skipped": {}, "xfailed": 0}
    old = {"release": "0.5.23", "install_s": 1.0, "run_s": 60.0, "error": "", "cells": {"pool": cell}}
    out, markdown = tmp_path / "m.json", tmp_path / "m.md"
    out.write_text(json.dumps({"rows": [old]}))
    vllm = (
        "<!-- matrix:vllm -->\n# vLLM\n\n## The findings, release by release\n\n| vLLM's own |\n<!-- /matrix:vllm -->\n"
    )
    markdown.write_text(
        vllm
        + "<!-- matrix:sglang -->\n# title\n\n| the full table |\n\n## The seeds against released SGLang\n\n| seeds |\n"
        "<!-- /matrix:sglang -->\n"
    )
    monkeypatch.setattr(
        sglang_matrix,
        "run_release",
        lambda release, suites: ReleaseRun(
            release.label, 0.0, 20.0, {"findings": Cell("passed", xfailed=3)}, findings={"8": "present"}
        ),
    )
    args = ["--release", "0.5.23", "--suite", "findings", "--update", "--out", str(out), "--markdown", str(markdown)]
    assert sglang_matrix.main([*args, "--findings-section-only"]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert set(row["cells"]) == {"pool", "findings"} and row["run_s"] == 80.0 and row["findings"] == {"8": "present"}
    text = markdown.read_text()
    assert "| the full table |" in text  # the rest of the document is left as it was
    sglang_part = text[text.index("<!-- matrix:sglang -->") :]
    assert sglang_part.index("## The findings, release by release") < sglang_part.index("## The seeds against")
    assert (
        "| #8 a paged decode that does not fit loses a page of the full pool | 0.5.23 | not fixed up to 0.5.23" in text
    )
    assert sglang_matrix.main([*args, "--findings-section-only"]) == 0  # again: the section is replaced, not added
    assert markdown.read_text().count("## The findings, release by release") == 2  # SGLang's and vLLM's
    assert markdown.read_text().startswith(vllm)  # the vLLM section, found first, is left as it was


def test_a_rerun_of_the_same_suites_replaces_the_row_and_its_times() -> None:
    from harness.jobs.sglang_matrix import merge_rows

    cell = {"status": "passed", "passed": 1, "failed": [], "skipped": {}, "xfailed": 0}
    old = {
        "release": "0.5.11",
        "install_s": 1.0,
        "run_s": 50.0,
        "error": "",
        "cells": {"findings": cell},
        "findings": {},
    }
    new = {**old, "run_s": 40.0, "findings": {"4": "present"}}
    (row,) = merge_rows([old], [new])
    assert row["run_s"] == 40.0 and row["findings"] == {"4": "present"}


def test_an_empty_range_writes_nothing_over_the_matrix_there(tmp_path: Path, monkeypatch) -> None:
    from harness.jobs import sglang_matrix

    out, markdown = tmp_path / "m.json", tmp_path / "m.md"
    kept = json.dumps({"rows": [{"release": "0.5.23", "install_s": 0.0, "run_s": 1.0, "error": "", "cells": {}}]})
    out.write_text(kept)
    monkeypatch.setattr(sglang_matrix, "published", lambda low, high: [])
    monkeypatch.delenv(SGLANG_SOURCE_ENV, raising=False)
    args = ["--from", "0.6.0", "--to", "0.6.1", "--update", "--out", str(out), "--markdown", str(markdown)]
    assert sglang_matrix.main(args) == 2
    assert out.read_text() == kept and not markdown.exists()


def test_a_module_that_imports_a_cuda_only_kernel_package_is_cpu_unreachable(tmp_path: Path, monkeypatch) -> None:
    """0.5.11's unified_radix_cache imports sgl_kernel through its host pool: a skip marked CPU-unreachable, not an
    error cell; any other missing import still raises."""
    assert "sgl_kernel" in capabilities.CUDA_ONLY_PACKAGES
    # a stand-in name for the kernel package, so the test holds where a shim of sgl_kernel is importable
    monkeypatch.setattr(capabilities, "CUDA_ONLY_PACKAGES", ("no_cpu_build_kernels",))
    (tmp_path / "wants_kernels.py").write_text("import no_cpu_build_kernels\n")
    (tmp_path / "wants_other.py").write_text("import no_such_package_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        NotOnThisSGLang, match=f"wants_kernels imports no_cpu_build_kernels, which has no CPU build: {UNREACHABLE}"
    ):
        capabilities.module("wants_kernels")
    with pytest.raises(ModuleNotFoundError, match="no_such_package_here"):
        capabilities.module("wants_other")
