"""Shards of the kill and release matrices (``--shard K/N``) merged by ``swa-harness merge``: equal to the matrix one
machine writes, cell by cell, and refused where the shards are not parts of one matrix (the field named).

The kill matrix runs the harness target's real catalog with ``run_suite`` replaced by a stub whose verdicts are a pure
function of (fault, suite, test), so a matrix built in one go and one built in shards must agree in every cell.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from harness.faults import matrix
from harness.jobs import merge, release_matrix, sglang_matrix
from harness.jobs.release_matrix import Cell, ReleaseRun
from harness.kill_record import FaultSpec, KillMatrix, VerdictLine, load, save
from harness.shards import WHOLE, Shard

TIMING = {"generated_at", "wall_s", "clean_and_recording_s", "jobs", "recordings"}  # what may differ between runs


def _h(*parts: str) -> int:
    return int.from_bytes(hashlib.sha256("|".join(parts).encode()).digest()[:4], "big")


def _tests(suite: str) -> list[str]:
    return [f"suites/{suite}/test_x.py::t{i}" for i in range(4)]


def stub_run_suite(target, fault_id, suite, workdir, timeout_s, *, select=None, record=None, settings=(), servers=None):  # noqa: ANN001
    """A pytest run without pytest: test t reaches fault f when a hash of (f, t) says so, and kills it when another
    does; the clean build passes every test."""
    faults = list(target.catalog())
    if record is not None:
        tests = [{"nodeid": t, "faults": [f for f in faults if _h(f, t) % 3 == 0]} for t in _tests(suite)]
        record.write_text(json.dumps({"target": target.name, "tests": tests, "code": {f: [f"m.{f}"] for f in faults}}))
    if fault_id is None:
        return matrix.SuiteOutcome(passed=len(_tests(suite))), 0.01
    passed = 0
    for nodeid in select or _tests(suite):
        if _h("kill", fault_id, nodeid) % 2 == 0:
            kill = VerdictLine(nodeid, "kill", "behavioural", "test_x.py:1", f"{fault_id} broke {nodeid}")
            return matrix.SuiteOutcome(passed=passed, kills=(kill,)), 0.01
        passed += 1
    return matrix.SuiteOutcome(passed=passed), 0.01


@pytest.fixture
def target(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> matrix.MatrixTarget:
    """The harness target, its real catalog with two faults given settings (so shards differ in clean builds run)."""
    monkeypatch.setattr(matrix, "run_suite", stub_run_suite)
    harness = matrix.MATRIX_TARGETS["harness"]
    catalog = harness.catalog()
    with_env = list(catalog)[:2]
    specs = {f: dataclasses.replace(s, env="X_CORE=python" if f in with_env else None) for f, s in catalog.items()}
    return dataclasses.replace(harness, catalog=lambda: specs, min_tests=dict.fromkeys(harness.suites, 1))


def _cells(m: KillMatrix) -> dict:
    data = m.to_json()
    return {k: v for k, v in data.items() if k not in TIMING} | {
        "faults": [{k: v for k, v in f.items() if k != "run_s"} for f in data["faults"]]
    }


@pytest.mark.parametrize("count", [2, 4])
def test_a_matrix_merged_from_shards_equals_the_one_built_in_one_go_cell_by_cell(
    target: matrix.MatrixTarget, tmp_path: Path, count: int
) -> None:
    ids = list(target.catalog())
    whole = matrix.build_matrix(target, ids, jobs=2)
    paths = []
    for k in range(1, count + 1):
        part = matrix.build_matrix(target, ids, jobs=2, shard=Shard(k, count))
        assert part.shard == f"{k}/{count}" and part.selection == tuple(ids)
        assert [f.spec.id for f in part.faults] == Shard(k, count).select(ids)
        save(part, paths.append(tmp_path / f"shard-{k}.json") or paths[-1])
    out = tmp_path / "merged.json"
    assert merge.main([*map(str, paths), "--out", str(out)]) == 0
    merged = load(out)
    assert merged.shard is None and merged.selection is None
    assert [f.spec.id for f in merged.faults] == ids  # the catalog's order
    for mine, theirs in zip(merged.faults, whole.faults, strict=True):
        for suite in target.suites:
            assert mine.cells[suite] == theirs.cells[suite], (mine.spec.id, suite)
    assert merged.clean == whole.clean and merged.clean_under_settings == whole.clean_under_settings
    assert _cells(merged) == _cells(whole)
    assert merged.wall_s == max(load(p).wall_s for p in paths)  # documented: the largest shard's


def test_shards_of_other_targets_commits_or_counts_are_refused_naming_the_field(tmp_path: Path) -> None:
    spec = FaultSpec("f-a")
    sel = ("f-a", "f-b", "f-c")
    holder = {f: next(k for k in (1, 2) if Shard(k, 2).holds(f)) for f in sel}

    def part(k: int, **kw) -> KillMatrix:
        rows = tuple(matrix.FaultRow(spec=dataclasses.replace(spec, id=f), cells={}) for f in sel if holder[f] == k)
        base = dict(target="sglang", commit="abc", suites=("pool",), shard=f"{k}/2", selection=sel, faults=rows)
        return KillMatrix(**{**base, "clean": {"pool": matrix.CleanCell("passed", 7, "7 tests passed")}, **kw})

    with pytest.raises(merge.MergeError, match="field target differs"):
        merge.merge_kill_matrices({"a": part(1), "b": part(2, target="vllm")})
    with pytest.raises(merge.MergeError, match="field commit differs: a has 'abc', b has 'def'"):
        merge.merge_kill_matrices({"a": part(1), "b": part(2, commit="def")})
    with pytest.raises(merge.MergeError, match="shards 2/2 missing"):
        merge.merge_kill_matrices({"a": part(1)})
    with pytest.raises(merge.MergeError, match="both shard 1/2"):
        merge.merge_kill_matrices({"a": part(1), "b": part(1)})
    failed = {"pool": matrix.CleanCell("failed", 6, "t [x.py:1]: boom")}
    with pytest.raises(merge.MergeError, match="clean build: suite pool differs between shards"):
        merge.merge_kill_matrices({"a": part(1), "b": part(2, clean=failed)})
    wrong = part(2, faults=part(1).faults)  # shard 2 holding shard 1's faults
    with pytest.raises(merge.MergeError, match="which the hash gives to other shards"):
        merge.merge_kill_matrices({"a": part(1), "b": wrong})
    assert merge.merge_kill_matrices({"a": part(1), "b": part(2)}).shard is None


def test_the_command_refuses_with_one_line_and_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    save(KillMatrix(target="sglang", shard="1/2", selection=()), a)
    save(KillMatrix(target="vllm", shard="2/2", selection=()), b)
    assert merge.main([str(a), str(b), "--out", str(tmp_path / "m.json")]) == 1
    assert "refused: field target differs" in capsys.readouterr().out
    assert not (tmp_path / "m.json").exists()


def test_release_matrix_shards_merge_into_the_whole_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        sglang_matrix,
        "run_release",
        lambda release, suites: ReleaseRun(release.label, 0.0, 1.0, {"pool": Cell("passed", passed=_h(release.label))}),
    )
    monkeypatch.setattr(release_matrix, "code_fingerprint", lambda: "abc")
    releases = ["0.5.13", "0.5.20", "0.5.22", "0.5.23"]
    args = [a for r in releases for a in ("--release", r)] + ["--suite", "pool"]
    md = tmp_path / "c.md"
    whole = tmp_path / "whole.json"
    assert sglang_matrix.main([*args, "--out", str(whole), "--markdown", str(md)]) == 0
    shards = [tmp_path / f"s{k}.json" for k in (1, 2, 3)]
    for k, path in enumerate(shards, 1):
        assert sglang_matrix.main([*args, "--out", str(path), "--markdown", str(md), "--shard", f"{k}/3"]) == 0
        held = [row["release"] for row in json.loads(path.read_text())["rows"]]
        assert held == Shard(k, 3).select(releases)
    out = tmp_path / "merged.json"
    assert merge.main([*map(str, shards), "--out", str(out)]) == 0
    merged, expected = json.loads(out.read_text()), json.loads(whole.read_text())
    assert merged["rows"] == expected["rows"]
    assert merge._without(merged["command"], "--out") == merge._without(expected["command"], "--out")
    assert merged.keys() == expected.keys()


def test_shard_of_one_is_the_whole_and_a_bad_flag_names_it() -> None:
    assert WHOLE.select(["a", "b"]) == ["a", "b"]
    with pytest.raises(SystemExit):
        matrix.main(["--shard", "5/4", "--list"])
