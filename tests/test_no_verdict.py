"""No false verdict (../shared/DESIGN.md, "Verdicts (wave 5)"): only a suite's own assertion is a kill or a FAIL; a
server that refused, dropped or never answered a request, a test that says it has no verdict, and an engine that is
missing or does not import are NO VERDICT (exit 2), in one line, never matched to a catalog fault. Held on real pytest
runs (the verdicts plugin), a real local HTTP server (``ask``), ``check``'s and the kill matrix's reporting, and the
real command line in this venv, which has neither SGLang nor vLLM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.env import STOP_ON_KILL_ENV, VERDICTS_ENV
from harness.faults import matrix
from harness.jobs import check
from harness.kill_record import KillMatrix, VerdictLine
from harness.paths import REPO
from harness.servers.lifecycle import ServerTransportError
from suites.servers.oracles import ask, free_port

pytest_plugins = ["pytester"]

KINDS = """
import pytest
from harness.servers.lifecycle import ServerTransportError

def test_assertion():
    assert [3] == [], "the pool handed slot 3 out twice"

def test_fail():
    pytest.fail("the pool handed slot 3 out twice")

def test_no_verdict():
    pytest.fail("NO VERDICT: the tight pool never came under pressure", pytrace=False)

def test_no_verdict_traced():
    pytest.fail("NO VERDICT: the server reported no cached tokens")

def test_dropped():
    raise ServerTransportError("dropped", "the server dropped a request; its log's last error: IndexError: index 161")

def test_crash():
    raise IndexError("index 161 is out of bounds")

def test_script_without_a_verdict():
    from suites.findings.conftest import ScriptRun
    ScriptRun(2, "SetupProblem: vllm.v1.core has no SlidingWindowManager", "", 1.0).judged("docs/repro/x.py")

def test_script_with_the_wrong_verdict():
    from suites.findings.conftest import EXIT_BUG, ScriptRun
    assert ScriptRun(0, "fixed", "", 1.0).judged("docs/repro/x.py") == EXIT_BUG, "the pinned release has the bug"
"""


def test_only_a_suite_assertion_is_a_kill(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    (pytester.path / "suites").mkdir()
    (pytester.path / "suites" / "test_kinds.py").write_text(KINDS)
    verdicts = pytester.path / "verdicts.jsonl"
    monkeypatch.setenv(VERDICTS_ENV, str(verdicts))
    monkeypatch.setenv(STOP_ON_KILL_ENV, "0")
    pytester.inline_run("suites", "-p", "harness.faults.verdicts", "-p", "no:cacheprovider")
    records = [json.loads(line) for line in verdicts.read_text().splitlines()]
    assert {r["nodeid"].split("::")[-1]: r["outcome"] for r in records} == {
        "test_assertion": "kill",
        "test_fail": "kill",
        "test_no_verdict": "error",
        "test_no_verdict_traced": "error",
        "test_dropped": "error",
        "test_crash": "error",
        "test_script_without_a_verdict": "error",  # a findings script that exited 2 (docs/repro): NO VERDICT
        "test_script_with_the_wrong_verdict": "kill",
    }


# -- ask(): a request that got no answer is ServerTransportError, never an assertion -----------------------------------


class _Misbehaving(BaseHTTPRequestHandler):
    """/refuse answers 500, /drop closes the connection without a word, /slow answers after a second."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.startswith("/refuse"):
            body = b'{"error": "scheduler died"}'
            self.send_response(500)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path.startswith("/drop"):
            self.close_connection = True
        elif self.path.startswith("/slow"):
            time.sleep(1.0)
            self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def misbehaving() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Misbehaving)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    "path,how,says",
    [("/refuse", "refused", "HTTP 500"), ("/drop", "dropped", "dropped a request"), ("/slow", "timeout", "0.2 s")],
)
def test_a_request_without_an_answer_is_a_transport_error_naming_the_logs_last_error(
    misbehaving: str, tmp_path: Path, path: str, how: str, says: str
) -> None:
    log = tmp_path / "server.log"
    log.write_text("Scheduler hit an exception\nIndexError: index 161 is out of bounds for dimension 0 with size 161\n")
    server = SimpleNamespace(completions_url=f"{misbehaving}{path}/v1/completions", log_path=log)
    with pytest.raises(ServerTransportError) as raised:
        ask(server, "m", "a prompt", 4, timeout=0.2)
    assert not isinstance(raised.value, AssertionError)
    assert raised.value.how == how and says in str(raised.value), str(raised.value)
    assert str(raised.value).endswith(
        "its log's last error: IndexError: index 161 is out of bounds for dimension 0 with size 161"
    ), str(raised.value)


def test_a_server_that_is_gone_drops_the_request(tmp_path: Path) -> None:
    server = SimpleNamespace(completions_url=f"http://127.0.0.1:{free_port()}/v1/completions", log_path=tmp_path / "x")
    with pytest.raises(ServerTransportError, match=r"dropped a request .*Connection refused.*last error: \(none\)"):
        ask(server, "m", "a prompt", 4, timeout=5)


# -- check and the kill matrix report an error as NO VERDICT ----------------------------------------------------------

KILLER = "suites/pool/test_x.py::test_slots"
CHECK_MATRIX = {
    "faults": [
        {
            "id": "sglang-pool-double-free",
            "seed": "#1",
            "suites": {
                "pool": {
                    "status": "killed",
                    "kill_class": "behavioural",
                    "killer": KILLER,
                    "first_failure": "test_x.py::test_slots [test_x.py:9]: ModuleNotFoundError: orjson",
                }
            },
        }
    ]
}


@pytest.mark.parametrize("kind,code", [("kill", 1), ("error", 2)])
def test_check_names_a_fault_only_for_a_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, code: int
) -> None:
    saved = tmp_path / "kill-matrix.json"
    saved.write_text(json.dumps(CHECK_MATRIX))
    failure = VerdictLine(KILLER, kind, where="test_x.py:9", message="ModuleNotFoundError: orjson")
    monkeypatch.setattr(check, "_run_stage", lambda name, *a, **kw: check.StageResult(name, 3, 1.0, failure))
    lines: list[str] = []
    who = check.UnderTest("release 0.5.23", sys.executable, None)
    assert check.check(replace(check._sglang(), matrix=saved), who, server=False, out=lines.append) == code
    said = "\n".join(lines)
    if kind == "kill":
        assert "FAIL suites/pool/test_x.py::test_slots" in said and "looks like catalog fault" in said, said
    else:
        assert "FAIL" not in said and "catalog fault" not in said, said
        assert lines[-1] == f"\nNO VERDICT: {KILLER} [test_x.py:9] errored, not a suite assertion: {failure.message}"


def _fault(fid: str, status: str) -> dict:
    cell = {"status": status, "kill_class": None, "first_failure": "t.py::test_a [t.py:1]: RuntimeError: died"}
    return {"id": fid, "seed": "#1", "suites": {"s": cell}}


def test_the_kill_matrix_says_no_verdict_for_a_fault_no_suite_could_judge() -> None:
    clean = {"s": {"status": "passed", "tests": 5, "detail": "5 tests passed"}}
    errored = {
        "target": "t",  # schema 1
        "clean": clean,
        "faults": [_fault("f-errored", "error")],
        "suites": ["s"],
        "wall_s": 1,
        "jobs": 1,
    }
    ok, problems = matrix.verdict(KillMatrix.from_json(errored))
    assert not ok and problems == [
        "NO VERDICT: fault f-errored: no suite killed it and one errored: t.py::test_a [t.py:1]: RuntimeError: died"
    ]
    assert matrix.exit_code(ok, problems) == 2
    assert "f-errored [#1]: NO VERDICT (a suite errored): t.py::test_a" in matrix.format_matrix(
        KillMatrix.from_json(errored)
    )
    both = {**errored, "faults": [_fault("f-errored", "error"), _fault("f-survives", "survived")]}
    assert matrix.exit_code(*matrix.verdict(KillMatrix.from_json(both))) == 1  # a survivor is a verdict: FAIL
    crashed = {**errored, "faults": [], "clean": {"s": {"status": "error", "tests": 0, "detail": "t.py: died"}}}
    assert matrix.exit_code(*matrix.verdict(KillMatrix.from_json(crashed))) == 2


def test_a_clean_build_that_only_crashed_is_an_error_not_a_failure() -> None:
    outcome = matrix.SuiteOutcome(passed=3, errors=(VerdictLine("t.py::a", "error", message="died"),))
    assert outcome.clean_status(1).status == "error"
    kill = VerdictLine("t.py::b", "kill", "behavioural", message="AssertionError")
    assert replace(outcome, kills=(kill,)).clean_status(1).status == "failed"


# -- the command line, in this venv (no SGLang, no vLLM) --------------------------------------------------------------


def _fake_engines(site: Path) -> Path:
    """SGLang and vLLM that are installed (a package and its dist-info) but import a dependency this venv lacks
    (orjson), beside SGLang's server stack (uvicorn, fastapi, xgrammar: empty packages)."""
    for name, version in (("sglang", "0.5.23"), ("vllm", "0.32.0")):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text("import orjson  # noqa: F401\n")
        meta = site / f"{name}-{version}.dist-info"
        meta.mkdir()
        (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for name in ("uvicorn", "fastapi", "xgrammar"):
        (site / name).mkdir()
        (site / name / "__init__.py").write_text("")
    return site


MISSING = [
    pytest.param(["check", "--sglang", "0.5.23", "--no-server"], "orjson", "nox -s check", id="check-release"),
    pytest.param(["faults", "--target", "sglang"], "No module named 'sglang'", "nox -s sglang", id="faults-sglang"),
    pytest.param(["faults", "--target", "vllm"], "No module named 'vllm'", "nox -s vllm", id="faults-vllm"),
    pytest.param(
        ["eval", "--plan", "suites/plans/sglang-cpu-smoke.yaml"],
        "missing sglang",
        "nox -s sglang_server",
        id="eval-sglang",
    ),
]
BROKEN = [
    pytest.param(
        ["check", "--sglang", "{site}", "--no-server"], "No module named 'orjson'", "nox -s sglang", id="check-checkout"
    ),
    pytest.param(["faults", "--target", "sglang"], "No module named 'orjson'", "nox -s sglang", id="faults-sglang"),
    pytest.param(["faults", "--target", "vllm"], "No module named 'orjson'", "nox -s vllm", id="faults-vllm"),
    pytest.param(
        ["eval", "--plan", "suites/plans/sglang-cpu-smoke.yaml"],
        "No module named 'orjson'",
        "nox -s sglang_server",
        id="eval-sglang",
    ),
]


def _no_verdict(argv: list[str], tmp_path: Path, env: dict[str, str]) -> str:
    """Run ``swa-harness <argv>`` here: it must end with exit 2 and one line (returned), before any work. How long it
    takes is a benchmark (``python -m bench.no_verdict``: 30 s is the goal); the timeout here only stops a command
    that went on to the work (the matrix's clean run printed nothing for 120 s)."""
    if argv[0] == "eval":
        argv = [*argv, "--no-history", "--out", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    assert done.returncode == 2 and lines, f"exit {done.returncode}:\n{done.stdout}\n{done.stderr}"
    said = "\n".join(lines)
    assert "FAIL" not in said and "catalog fault" not in said and "Traceback" not in said, said
    assert len(lines) == 1 or argv[0] == "eval" and len(lines) == 2, said  # eval names its plan first
    return lines[-1]


@pytest.mark.parametrize("argv,missing,builds", MISSING)
def test_an_engine_that_is_not_here_is_no_verdict_in_one_line(
    tmp_path: Path, argv: list[str], missing: str, builds: str
) -> None:
    line = _no_verdict(argv, tmp_path, dict(os.environ))
    assert "NO VERDICT" in line.upper() and missing in line and builds in line, line


@pytest.mark.parametrize("argv,missing,builds", BROKEN)
def test_an_engine_whose_dependencies_do_not_import_is_no_verdict_in_one_line(
    tmp_path: Path, argv: list[str], missing: str, builds: str
) -> None:
    site = _fake_engines(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])}
    line = _no_verdict([a.format(site=site) for a in argv], tmp_path, env)
    assert "NO VERDICT" in line.upper() and missing in line and builds in line, line
