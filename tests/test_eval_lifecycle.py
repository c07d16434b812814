"""The eval job as a process (issue 15): it owns its children, and every failure says what failed.

* a killed ``swa-harness eval`` (SIGTERM, or SIGKILL) leaves no server and no lm-eval behind;
* exit codes: 2 when the harness or its infrastructure failed (with a one-line reason naming the
  part), usage errors caught at argument parsing before anything starts;
* ``--resume`` reuses cached answers only from a server that reports the same identity.

Every wait is bounded; processes are found and checked by PID through /proc.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.jobs import runner, session
from harness.jobs.cpu import EvalConfig, cpu_plan
from harness.jobs.eval_cli import build_parser, parse_config
from harness.jobs.options import RunOptions
from harness.jobs.plan import EvalStep
from harness.jobs.progress import Progress
from harness.servers.harness_server import HarnessServer
from harness.servers.lifecycle import Command, ServerProcess
from tests.waits import scaled

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")


# -- the process table ---------------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of ``pid``, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(root: int) -> dict[int, str]:
    """Every live process below ``root``, with its command line."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            parents.setdefault(st[1], []).append(int(entry.name))
    found, todo = {}, list(parents.get(root, []))
    while todo:
        pid = todo.pop()
        found[pid] = _cmdline(pid)
        todo += parents.get(pid, [])
    return found


def alive(pid: int, cmdline: str) -> bool:
    """``pid`` still runs the same command (a zombie or a reused PID is not it)."""
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X") and _cmdline(pid) == cmdline


def kill_leftovers(procs: dict[int, str]) -> None:
    for pid, cmdline in procs.items():
        if alive(pid, cmdline):
            os.kill(pid, signal.SIGKILL)


# -- a killed eval leaves nothing behind ------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_eval_leaves_no_process_behind(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "harness.cli",
        "eval",
        "--tasks",
        "gsm_style",
        "--limit-gsm-style",
        "64",
        "--out",
        str(out),
        "--kill-matrix",
        str(tmp_path / "none.json"),
        "--server-timeout",
        "120",
    ]
    log = tmp_path / "eval.log"
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    seen: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 120
        while True:  # mid-run: both servers up and both lm-eval runs started
            seen.update(descendants(proc.pid))
            lm_evals = [pid for pid, c in seen.items() if " lm_eval " in c and alive(pid, c)]
            started = all((out / "gemma2-tiny-swa" / m / "lm_eval-all.log").is_file() for m in ("on", "off"))
            if started and len(lm_evals) >= 2:
                break
            assert proc.poll() is None, f"the eval ended early ({proc.returncode}):\n{log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, f"no lm-eval after 120 s:\n{log.read_text()[-2000:]}"
            time.sleep(0.2)
        seen.update(descendants(proc.pid))
        assert sum("harness.http_server" in c for c in seen.values()) >= 2, seen
        os.kill(proc.pid, sig)
        code = proc.wait(timeout=scaled(120))
        deadline = time.monotonic() + 30
        while (left := {p: c for p, c in seen.items() if alive(p, c)}) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not left, f"still running after the eval was killed with {sig.name}: {left}"
        if sig == signal.SIGTERM:
            assert code == 128 + signal.SIGTERM, (code, log.read_text()[-2000:])
            assert "interrupted by SIGTERM" in log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        kill_leftovers(seen)


# -- usage errors: exit 2 at argument parsing ------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--limit-gsm-style", "0"], "--limit-gsm-style"),
        (["--limit-gsm-style", "-3"], "--limit-gsm-style"),
        (["--limit-gsm-style", "501"], "500"),
        (["--limit-aime-style", "201"], "200"),
        (["--batch-size", "0"], "--batch-size"),
        (["--max-running", "0"], "--max-running"),
        (["--threads", "-1"], "--threads"),
        (["--server-timeout", "0"], "--server-timeout"),
        (["--lm-eval-timeout", "nan"], "--lm-eval-timeout"),
    ],
)
def test_usage_errors_exit_2_before_anything_starts(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_config(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert words in err.splitlines()[-1], err


def test_the_old_suites_option_still_selects_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    """``--suites`` is ``--tasks``' old name: scripts that still say it keep working, and are told."""
    old, new = parse_config(["--suites", "aime_style"]), parse_config(["--tasks", "aime_style"])
    assert old.limits == new.limits and list(new.limits) == ["aime_style"]
    assert "--suites is deprecated; use --tasks" in capsys.readouterr().err
    assert "--suites" not in build_parser().format_help()


# -- infrastructure failures name the failed part ----------------------------------------------------


class FakeServer:
    """An OpenAI-style server on 127.0.0.1 that answers /health and /v1/models with ``identity``."""

    def __init__(self, identity: dict[str, Any]) -> None:
        self.identity = identity
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path == "/health":
                    body = {"status": "ok", **outer.identity}
                elif self.path == "/v1/models":
                    body = {"object": "list", "data": [{"id": outer.identity.get("model"), "object": "model"}]}
                else:
                    self.send_error(404)
                    return
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_server() -> Iterator[FakeServer]:
    server = FakeServer({"model": "swa-harness", "graph_mode": "tape", "build": "b1"})
    yield server
    server.close()


def fake_python(tmp_path: Path, url: str) -> str:
    """A stand-in interpreter for the server: it prints the ready line for ``url`` (a FakeServer) and sleeps."""
    script = tmp_path / "fake-python"
    script.write_text(f'#!/bin/sh\necho "SWA_HARNESS_SERVER_READY {url}"\nexec sleep 60\n')
    script.chmod(0o755)
    return str(script)


def config(tmp_path: Path, **overrides: Any) -> EvalConfig:
    return EvalConfig(
        **{
            "model": tmp_path / "model",
            "limits": {"gsm_style": 2},
            "out": tmp_path / "out",
            "batch_size": 2,
            "graphs_on": "tape",
            "kill_matrix": tmp_path / "none.json",
            **overrides,
        }
    )


def options(tmp_path: Path, **overrides: Any) -> RunOptions:
    return RunOptions(
        **{"server_timeout": scaled(60), "eval_timeout": scaled(60), "kill_matrix": tmp_path / "none.json", **overrides}
    )


def recording_start(monkeypatch: pytest.MonkeyPatch) -> list[ServerProcess]:
    """Every server the harness engine starts, in order."""
    launched: list[ServerProcess] = []
    start = HarnessServer.start

    def recorded(self: HarnessServer, *args: Any, **kwargs: Any) -> ServerProcess:
        launched.append(start(self, *args, **kwargs))
        return launched[-1]

    monkeypatch.setattr(HarnessServer, "start", recorded)
    return launched


def test_a_server_that_dies_is_named_as_the_failure(
    tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to read "lm-eval exited with code 1"."""
    launched = recording_start(monkeypatch)

    def lm_eval_whose_server_dies(command: Command, log_path: Path, timeout: float, **kwargs: Any) -> int:
        os.killpg(launched[0].pid, signal.SIGKILL)  # the server's whole process group
        launched[0].proc.wait(10)
        return 1

    monkeypatch.setattr(session, "run_lm_eval", lm_eval_whose_server_dies)
    with Progress(interval_s=60) as progress:
        [result] = session.run_arm(
            cpu_plan(config(tmp_path)).runs[0],
            options(tmp_path, python=fake_python(tmp_path, fake_server.url)),
            progress,
        )
    assert not result.complete and "\n" not in result.error, result.error
    assert "server" in result.error and "died" in result.error and "lm-eval exited" not in result.error, result.error
    assert "on/server.log" in result.error, result.error


def test_a_timed_out_lm_eval_is_one_line_and_leaves_nothing(
    tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It used to put lm-eval's whole command line into the report's banner."""
    launched = recording_start(monkeypatch)
    marker = f"time.sleep(60)  # {tmp_path.name}"
    monkeypatch.setattr(
        EvalStep, "command", lambda self, url, cache=None: Command((sys.executable, "-c", f"import time; {marker}"))
    )
    with Progress(interval_s=60) as progress:
        start = time.monotonic()
        [result] = session.run_arm(
            cpu_plan(config(tmp_path)).runs[0],
            options(tmp_path, eval_timeout=1, python=fake_python(tmp_path, fake_server.url)),
            progress,
        )
    assert time.monotonic() - start < 20
    assert not result.complete and "\n" not in result.error, result.error
    assert "lm-eval (on) timed out after 1 s" in result.error and "lm_eval-all.log" in result.error, result.error
    assert "time.sleep" not in result.error and len(result.error) < 300, result.error
    assert not [c for c in descendants(os.getpid()).values() if marker in c]
    assert launched and all(not s.alive() for s in launched)


def test_an_infrastructure_failure_exits_2_with_a_one_line_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that never starts used to end RED (exit 1), like a regression."""
    script = tmp_path / "broken-python"
    script.write_text(
        '#!/bin/sh\necho "Traceback (most recent call last):" >&2\necho "CheckpointError: no config.json" >&2\nexit 1\n'
    )
    script.chmod(0o755)
    code = runner.run_plan(cpu_plan(config(tmp_path)), options(tmp_path, python=str(script)))
    captured = capsys.readouterr()
    assert code == 2, captured.err
    [reason] = [line for line in captured.err.splitlines() if line.startswith("swa-harness eval: no verdict")]
    assert "server (on)" in reason and "exited with code 1 before it was ready" in reason, reason
    assert "RED" not in captured.err
    runs = [json.loads(p.read_text()) for p in (tmp_path / "out").glob("*/*/runs/*.json")]
    assert len(runs) == 3 and all(not r["complete"] and "\n" not in r["error"] for r in runs), runs  # every arm


def test_an_unknown_fault_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_config(["--fault", "no-such-fault"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "unknown fault 'no-such-fault'" in err.strip().splitlines()[-1], err


def test_an_engine_that_is_not_installed_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for engine in ("sglang", "vllm"):
        with pytest.raises(SystemExit) as exit_:
            parse_config(["--engine", engine])
        assert exit_.value.code == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"swa-harness eval: engine {engine} is not installed (missing "), line


# -- the resume cache knows which server answered -----------------------------------------------------


def test_resume_against_an_untrusted_external_server_stops_the_job_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``check_plan`` asks each arm (``Arm.resume_refused``): nothing starts, nothing is written, exit 2."""
    plan = cpu_plan(config(tmp_path, on_url="http://127.0.0.1:9", off_url="http://127.0.0.1:9"))
    code = runner.run_plan(plan, options(tmp_path, resume=True))
    [line] = capsys.readouterr().err.strip().splitlines()
    assert code == 2, line
    assert line.startswith("swa-harness eval: cannot start, no verdict: --resume: arm on is the external server"), line
    assert "add --resume-trusting-url" in line and not (tmp_path / "out").exists()


def test_resume_reuses_answers_only_from_a_server_with_the_same_identity(
    tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    caches: list[Path] = []

    def capture(self: EvalStep, url: str, cache: Path | None = None) -> Command:
        caches.append(cache)
        return Command(("unused",))

    monkeypatch.setattr(EvalStep, "command", capture)
    monkeypatch.setattr(session, "run_lm_eval", lambda command, log_path, timeout, **kwargs: 1)
    run = cpu_plan(config(tmp_path, on_url=fake_server.url, off_url=fake_server.url)).runs[0]
    identities = [{"build": "b1"}, {"build": "b2"}, {"graph_mode": "off"}, {"model": "other"}, {}]
    with Progress(interval_s=60) as progress:
        untrusted = session.run_arm(run, options(tmp_path, resume=True), progress)
        assert caches == [] and "--resume-trusting-url" in (untrusted[0].error or "")  # refused: an external URL
        for change in identities:
            fake_server.identity = {"model": "swa-harness", "graph_mode": "tape", "build": "b1", **change}
            session.run_arm(run, options(tmp_path, resume=True, resume_trusting_url=True), progress)
    first, build, graphs, model, again = caches
    assert len({first, build, graphs, model}) == 4, caches
    assert again == first  # the same server again: its answers are reused
