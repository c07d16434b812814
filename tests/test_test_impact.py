"""Test impact for the kill matrices (harness/faults/impact.py, the impact mode of harness/faults/matrix.py).

The recording is checked on a real pytest session over the real catalog: a test is credited with a fault when it,
a fixture it uses, or its module's collection runs the fault's code, and with every fault when it starts a process.
The matrix's planning (killers first, stop at the first behavioural kill, unreached never survived) is checked
with the suite runs replaced by recorded outcomes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.env import IMPACT_ENV, SELECT_ENV
from harness.faults import matrix
from harness import kill_record
from harness.faults.impact import EVERY_FAULT, Impact, harness_fault_code
from harness.kill_record import FaultSpec, KillMatrix, VerdictLine
from harness.paths import REPO

INNER = textwrap.dedent(
    """
    import subprocess, sys
    import pytest
    from harness.graph.buffers import DecodeInputBuffers
    from harness.reuse import ResponseKey, TokenizerMemo

    @pytest.fixture(scope="module")
    def memo_key():
        return TokenizerMemo.key("/nonexistent-folder")

    def test_calls_a_seam():
        assert ResponseKey.env_of({"A": "1"}) == (("A", "1"),)

    def test_first_user_of_the_fixture(memo_key):
        assert memo_key[0] == "/nonexistent-folder"

    def test_second_user_of_the_fixture(memo_key):
        assert memo_key[0] == "/nonexistent-folder"

    def test_reaches_nothing():
        assert sum(range(4)) == 6

    def test_reads_a_table_seam():
        assert DecodeInputBuffers.create(2, 8, is_hybrid_swa=True).inputs

    def test_spawns_a_process():
        assert subprocess.run([sys.executable, "-c", "pass"]).returncode == 0
    """
)


def _inner_pytest(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(INNER)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "test_inner.py",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "harness.faults.impact",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, frozenset[str]]:
    tmp = tmp_path_factory.mktemp("impact")
    proc = _inner_pytest(tmp, {IMPACT_ENV: f"harness:{tmp / 'impact.json'}"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    impact = Impact.load(tmp / "impact.json")
    return {nodeid.split("::")[-1]: faults for nodeid, faults in impact.tests}


def test_a_test_that_calls_a_seam_reaches_its_fault_only(recorded: dict[str, frozenset[str]]) -> None:
    assert recorded["test_calls_a_seam"] == {"resume-key-drops-env"}


def test_every_user_of_a_fixture_reaches_what_its_setup_ran(recorded: dict[str, frozenset[str]]) -> None:
    # The module fixture is set up once, inside the first test; the second test sees its value all the same.
    assert recorded["test_first_user_of_the_fixture"] == {"tokenizer-memo-keyed-by-folder"}
    assert recorded["test_second_user_of_the_fixture"] == {"tokenizer-memo-keyed-by-folder"}


def test_a_table_seam_is_reached_through_the_methods_that_read_it(recorded: dict[str, frozenset[str]]) -> None:
    assert recorded["test_reads_a_table_seam"] == {"pad-swa-loc-not-zeroed", "swa-loc-int64"}


def test_unrelated_and_spawning_tests(recorded: dict[str, frozenset[str]]) -> None:
    assert recorded["test_reaches_nothing"] == frozenset()
    assert EVERY_FAULT in recorded["test_spawns_a_process"]


def test_selection_runs_the_listed_tests_in_the_listed_order(tmp_path: Path) -> None:
    order = ["test_inner.py::test_reaches_nothing", "test_inner.py::test_calls_a_seam"]
    (tmp_path / "select.json").write_text(json.dumps(order))
    (tmp_path / "test_inner.py").write_text(INNER)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "test_inner.py",
            "-v",
            "-p",
            "no:cacheprovider",
            "-p",
            "harness.faults.impact",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), SELECT_ENV: str(tmp_path / "select.json")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    ran = [line.split(" ")[0] for line in proc.stdout.splitlines() if line.endswith("]") and " PASSED" in line]
    assert ran == order, proc.stdout
    assert "4 deselected" in proc.stdout


def test_every_catalog_fault_names_code_that_exists() -> None:
    code = harness_fault_code()
    assert set(code) == {f.id for f in matrix.MATRIX_TARGETS["harness"].catalog().values()}
    assert all(code.values()), [fid for fid, names in code.items() if not names]


# -- planning, with the suite runs replaced ------------------------------------------------------------------


def _target(tmp_path: Path) -> matrix.MatrixTarget:
    return matrix.MatrixTarget(
        "harness",
        {"a": "suites/a", "b": "suites/b"},
        {"a": 1, "b": 1},
        "SWA_HARNESS_FAULT",
        lambda: {fid: FaultSpec(fid, "#1") for fid in ("f-killed", "f-unreached", "f-survives")},
        out=tmp_path / "km.json",
    )


def _fake_runs(monkeypatch: pytest.MonkeyPatch, kills: dict[str, str]) -> list[tuple[str | None, str, list[str]]]:
    """Replace run_suite: a clean run writes a recording in which the tests' names say which faults they reach;
    a fault run kills at the first selected test named in ``kills``."""
    calls: list[tuple[str | None, str, list[str]]] = []
    tests = {
        "a": [
            ("suites/a/t.py::reach_killed_1", ["f-killed"]),
            ("suites/a/t.py::reach_both", ["f-killed", "f-survives"]),
        ],
        "b": [("suites/b/t.py::reach_killed_2", ["f-killed"]), ("suites/b/t.py::reach_nothing", [])],
    }

    def run_suite(target, fault_id, suite, workdir, timeout_s, *, select=None, record=None, settings=(), servers=None):  # noqa: ANN001
        calls.append((fault_id, suite, list(select or [])))
        if record is not None:
            payload = {"target": "harness", "tests": [{"nodeid": n, "faults": f} for n, f in tests[suite]], "code": {}}
            record.write_text(json.dumps({**payload, "code": {"f-unreached": ["m.gone"]}}))
            return matrix.SuiteOutcome(passed=len(tests[suite])), 0.0
        passed = 0
        for nodeid in select or []:
            if kills.get(fault_id) == nodeid:
                kill = VerdictLine(nodeid, "kill", "behavioural", "t.py:1", "AssertionError")
                return matrix.SuiteOutcome(passed=passed, kills=(kill,)), 0.0
            passed += 1
        return matrix.SuiteOutcome(passed=passed), 0.0

    monkeypatch.setattr(matrix, "run_suite", run_suite)
    return calls


def test_impact_mode_runs_reaching_tests_killers_first_and_stops_at_a_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_runs(monkeypatch, {"f-killed": "suites/b/t.py::reach_killed_2"})
    previous = KillMatrix.from_json(
        {
            "faults": [
                {
                    "id": "f-killed",
                    "suites": {
                        "b": {
                            "status": "killed",
                            "kill_class": "behavioural",
                            "first_failure": "t.py::reach_killed_2 [t.py:1]: x",
                        }
                    },
                }
            ]
        }
    )  # schema 1: the killer in its failure line
    m = matrix.build_matrix(_target(tmp_path), ["f-killed", "f-unreached", "f-survives"], jobs=1, previous=previous)
    faults = {f.spec.id: f for f in m.faults}
    # The last killer's suite runs first, with the killer first; the other suite is then not run.
    assert [c for c in calls if c[0] == "f-killed"] == [("f-killed", "b", ["suites/b/t.py::reach_killed_2"])]
    assert faults["f-killed"].cells["a"].status == "not run"
    assert faults["f-killed"].verdict() == "killed: behavioural"
    # No test reaches it: unreached, with its code, and no run at all.
    assert not [c for c in calls if c[0] == "f-unreached"]
    assert faults["f-unreached"].verdict() == "unreached"
    assert faults["f-unreached"].code == ("m.gone",)
    # Reached by one test of suite a only: that test runs, nothing kills it.
    assert [c for c in calls if c[0] == "f-survives"] == [("f-survives", "a", ["suites/a/t.py::reach_both"])]
    assert faults["f-survives"].verdict() == "survived"
    ok, problems = matrix.verdict(m)
    assert not ok
    assert problems == [
        "fault f-unreached: no test reaches its code (m.gone)",
        "fault f-survives survived every suite",
    ]


def test_compare_names_each_fault_whose_verdict_differs() -> None:
    killed = {"status": "killed", "kill_class": "behavioural"}
    a = KillMatrix.from_json({"faults": [{"id": "x", "suites": {"s": killed}}, {"id": "y", "suites": {"s": killed}}]})
    b = KillMatrix.from_json(
        {"faults": [{"id": "x", "suites": {"s": killed}}, {"id": "y", "suites": {"s": {"status": "survived"}}}]}
    )
    assert matrix.compare(a, a) == []
    assert matrix.compare(a, b) == ["y: killed: behavioural vs survived"]


# -- swa-harness check: what it runs first and what it says a failure looks like ---------------------------------

MATRIX = KillMatrix.from_json(  # schema 1, as the matrices before schema_version were written
    {
        "faults": [
            {
                "id": "a",
                "seed": "#1",
                "suites": {
                    "s": {
                        "status": "killed",
                        "kill_class": "behavioural",
                        "killer": "suites/s/test_x.py::test_shared",
                        "first_failure": "test_x.py::test_shared [test_x.py:3]: AssertionError: padded rows wrote slots [4]",
                    }
                },
            },
            {
                "id": "b",
                "seed": "#2",
                "suites": {
                    "s": {
                        "status": "killed",
                        "kill_class": "behavioural",
                        "first_failure": "test_x.py::test_shared [test_x.py:3]: AssertionError: seq_lens [9, 1] differ",
                    },
                    "t": {
                        "status": "killed",
                        "kill_class": "behavioural",
                        "first_failure": "test_y.py::test_own [test_y.py:9]: AssertionError: mapping kept 3 freed slots",
                    },
                },
            },
        ]
    }
)


def test_check_runs_the_test_that_killed_the_most_faults_first() -> None:
    from harness.jobs.check import killers_by_count

    # test_shared killed a and b (b's matrix predates node ids: its killer is the file's part); test_own killed b.
    # The killers of a fault whose code the checkout changed run before every other.
    assert killers_by_count(MATRIX, ["b"])[:2] == ["test_x.py::test_shared", "test_y.py::test_own"]
    assert killers_by_count(MATRIX) == [
        "suites/s/test_x.py::test_shared",
        "test_x.py::test_shared",
        "test_y.py::test_own",
    ]


def test_a_failure_looks_like_the_fault_its_test_killed_with_the_closest_message() -> None:
    from harness.jobs.check import resembles

    like = resembles(
        VerdictLine("suites/s/test_x.py::test_shared", "kill", message="AssertionError: seq_lens [9, 2] differ"), MATRIX
    )
    assert (like.fault, like.how) == ("b", "same test")
    like = resembles(
        VerdictLine("suites/s/test_x.py::test_shared", "kill", message="AssertionError: padded rows wrote slots [5]"),
        MATRIX,
    )
    assert (like.fault, like.how) == ("a", "same test")
    # A test no fault was killed by: the closest message anywhere, said as such.
    like = resembles(
        VerdictLine("suites/u/test_z.py::test_new", "kill", message="AssertionError: mapping kept 2 freed slots"),
        MATRIX,
    )
    assert (like.fault, like.how) == ("b", "closest message")
    assert resembles(VerdictLine("x", "kill", message="m"), None) is None


def test_check_refuses_what_it_cannot_set_up(tmp_path: Path) -> None:
    from harness.jobs.check import SetupError, under_test

    with pytest.raises(SetupError, match="no sglang/__init__.py"):
        under_test("sglang", str(tmp_path))
    with pytest.raises(SetupError, match="no such folder"):
        under_test("sglang", str(tmp_path / "missing"))
    with pytest.raises(SetupError, match="its own venv"):
        under_test("vllm", "0.31.0")
    (tmp_path / "python" / "sglang").mkdir(parents=True)
    (tmp_path / "python" / "sglang" / "__init__.py").write_text("")
    assert under_test("sglang", str(tmp_path)).path == str((tmp_path / "python").resolve())


def test_the_vllm_catalog_names_the_test_that_killed_each_fault_in_the_committed_matrix() -> None:
    """docs/FAULTS.md's "killed by" column (KILLED_BY) is a claim: the committed vLLM kill matrix must bear it out."""
    from harness.targets.vllm.faults.by_id import KILLED_BY, VLLM_FAULTS

    committed = kill_record.load(REPO / "reports" / "kill-matrix-vllm.json")
    killers = {fid: [f.nodeid for f in failures] for fid, failures in committed.behavioural_killers().items()}
    assert set(killers) == set(VLLM_FAULTS), "every vLLM fault killed behaviourally in the committed matrix"
    assert {fid: killers[fid] for fid in VLLM_FAULTS} == {fid: [KILLED_BY[fid][0]] for fid in VLLM_FAULTS}


def test_check_finds_the_catalog_functions_a_checkout_changed(tmp_path: Path) -> None:
    from harness.jobs.check import _function_source

    module = tmp_path / "m.py"
    module.write_text(
        "class Pool:\n    def free(self):\n        return 1\n\n    class Inner:\n        def f(self):\n            pass\n"
    )
    assert _function_source(module, "Pool.free") == "def free(self):\n        return 1"
    assert _function_source(module, "Pool.Inner.f") is not None
    assert _function_source(module, "Pool") is None and _function_source(module, "Pool.gone") is None
    assert _function_source(tmp_path / "missing.py", "Pool.free") is None
