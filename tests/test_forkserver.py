"""The kill matrix's fork server (harness/faults/forkserver.py): a run forked from a warm server gives what a pytest
subprocess gives, a fault switched on in one child is in no later run and never in the server, and a child that
hangs or dies is an error that names it, never an exit code a verdict is read from."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.faults import forkserver, inject, matrix
from harness.mutants import swap
from harness.faults.forkserver import ForkRunTimeout, ForkServer, ForkServerError, ForkServers, ForkServerSpec, _Faults
from harness.paths import REPO

SUITE = "suites/reuse/test_reuse_keys.py"
FAULT = "resume-key-drops-env"
KILLER = f"{SUITE}::test_changing_one_field_of_the_resume_key_misses_the_cache[env]"
PASSING = f"{SUITE}::test_what_a_trend_follows_stays_in_its_series[code]"
TARGET = matrix.MatrixTarget(
    name="harness",
    suites={"reuse": SUITE},
    min_tests={"reuse": 1},
    fault_env=matrix.FAULT_ENV,
    catalog=matrix._harness_catalog,
    pytest_args=("--target", "harness"),  # a target's arguments reach the server's collection and every run
)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ForkServers]:
    with matrix.start_servers(TARGET, tmp_path_factory.mktemp("forkserver"), 1) as started:
        started.ready()
        yield started


@pytest.fixture
def server(servers: ForkServers) -> ForkServer:
    return servers.servers[0]


def _env(tmp_path: Path, fault: str = "") -> dict[str, str]:
    return matrix.run_env(tmp_path / "v.jsonl", stop_on_kill=bool(fault), extra={matrix.FAULT_ENV: fault})


def test_a_forked_run_gives_the_verdicts_and_exit_code_of_a_subprocess(tmp_path: Path, servers: ForkServers) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "fork").mkdir()
    select = [PASSING, KILLER]
    by_subprocess, _ = matrix.run_suite(TARGET, FAULT, "reuse", tmp_path / "sub", 300, select=select)
    by_fork, _ = matrix.run_suite(TARGET, FAULT, "reuse", tmp_path / "fork", 300, select=select, servers=servers)
    assert by_fork == by_subprocess
    assert by_fork.passed == 1 and [k.nodeid for k in by_fork.kills] == [KILLER]  # the fault was on in the child
    argv = matrix.pytest_argv(TARGET, [SUITE, "-k", "resume_key"])
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *argv], cwd=REPO, env=_env(tmp_path, FAULT), capture_output=True, timeout=300
    )
    forked = servers.run(argv, _env(tmp_path, FAULT), timeout_s=300, log=tmp_path / "run.log")
    assert forked.returncode == proc.returncode == 2  # stopped at its first behavioural kill


def test_a_fault_in_one_child_is_in_no_later_run_and_never_in_the_server(tmp_path: Path, server: ForkServer) -> None:
    argv = matrix.pytest_argv(TARGET, [KILLER])
    assert server.run(argv, _env(tmp_path, FAULT), timeout_s=300, log=tmp_path / "a.log").returncode == 2
    assert server.state() == []
    after = server.run(argv, _env(tmp_path), timeout_s=300, log=tmp_path / "b.log")
    assert after.returncode == 0, after.output
    assert server.state() == []


def _mutant_env(tmp_path: Path, function: str | None) -> dict[str, str]:
    """A mutant of the function the suite's killer reads: the resume key forgets every variable."""
    source = (REPO / "harness/reuse.py").read_text()
    kept = "return tuple(sorted((name, _env_value(value)) for name, value in env.items()))"
    assert source.count(kept) == 1
    mutated = source.replace(kept, "return tuple(sorted((name, _env_value(value)) for name, value in {}.items()))")
    assert swap.changed_function(source, mutated, "reuse.py") == "ResponseKey.env_of"
    spec = tmp_path / "mutant.json"
    spec.write_text(json.dumps({"module": "harness.reuse", "source": mutated, "function": function}))
    return {**_env(tmp_path), matrix.STOP_ON_KILL_ENV: "1", matrix.MUTANT_ENV: str(spec)}


def test_a_mutant_swapped_into_a_forked_child_is_killed_as_in_a_fresh_process(
    tmp_path: Path, server: ForkServer
) -> None:
    argv = matrix.pytest_argv(TARGET, [KILLER, PASSING], plugins=("harness.mutants.activate",))
    env = _mutant_env(tmp_path, "ResponseKey.env_of")
    proc = subprocess.run([sys.executable, "-m", "pytest", *argv], cwd=REPO, env=env, capture_output=True, timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:]  # imported from the mutated text, killed by the suite
    forked = server.run(argv, env, timeout_s=300, log=tmp_path / "m.log")
    assert forked.returncode == 2, forked.output  # swapped into the imported module, killed the same
    assert server.run(argv, _env(tmp_path), timeout_s=300, log=tmp_path / "c.log").returncode == 0  # not in a later run
    unnamed = server.run(argv, _mutant_env(tmp_path, None), timeout_s=300, log=tmp_path / "u.log")
    assert unnamed.returncode != 0 and "imported before the mutant could be installed" in unnamed.output


def test_the_server_sees_a_fault_applied_in_its_own_process() -> None:
    faults = _Faults("harness")
    assert faults.applied() == []
    with inject(FAULT):
        assert any(FAULT in line for line in faults.applied())
    assert faults.applied() == []


HANGS = textwrap.dedent(
    """
    import os, time

    def test_hangs():
        open("pid", "w").write(str(os.getpid()))
        time.sleep(600)
    """
)
DIES = textwrap.dedent(
    """
    import os, signal

    def test_passes():
        pass

    def test_ends_the_process():
        os._exit(0)

    def test_is_killed():
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_child_past_its_limit_is_killed_and_reported(tmp_path: Path, server: ForkServer) -> None:
    (tmp_path / "test_hangs.py").write_text(HANGS)
    with pytest.raises(ForkRunTimeout, match=r"passed its limit of 3 s and was killed"):
        server.run(
            ["test_hangs.py", "-p", "no:cacheprovider"], _env(tmp_path), timeout_s=3, log=tmp_path / "log", cwd=tmp_path
        )
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    again = server.run(
        ["test_hangs.py", "-k", "nothing"], _env(tmp_path), timeout_s=60, log=tmp_path / "l", cwd=tmp_path
    )
    assert again.returncode == 5  # the server serves on: nothing collected


@pytest.mark.parametrize(
    ("test", "said"),
    [("test_ends_the_process", "exited 0 before pytest.main returned"), ("test_is_killed", "died of signal 9")],
)
def test_a_child_that_dies_is_an_error_not_an_exit_code(
    tmp_path: Path, server: ForkServer, test: str, said: str
) -> None:
    (tmp_path / "test_dies.py").write_text(DIES)
    with pytest.raises(ForkServerError, match=said):
        server.run([f"test_dies.py::{test}"], _env(tmp_path), timeout_s=60, log=tmp_path / "log", cwd=tmp_path)
    ok = server.run(["test_dies.py::test_passes"], _env(tmp_path), timeout_s=60, log=tmp_path / "log", cwd=tmp_path)
    assert ok.returncode == 0


def test_a_setting_read_at_interpreter_start_is_refused(tmp_path: Path, server: ForkServer) -> None:
    env = {**_env(tmp_path), "PYTHONHASHSEED": "1"}
    with pytest.raises(ForkServerError, match="PYTHONHASHSEED='1' cannot take effect in a forked child"):
        server.run([SUITE], env, timeout_s=60, log=tmp_path / "log")


def test_a_recording_run_is_refused(tmp_path: Path, server: ForkServer) -> None:
    env = {**_env(tmp_path), matrix.IMPACT_ENV: f"harness:{tmp_path / 'i.json'}"}
    with pytest.raises(ForkServerError, match="must be a subprocess"):
        server.run([SUITE], env, timeout_s=60, log=tmp_path / "log")


def test_a_server_never_starts_with_a_fault_in_its_environment(tmp_path: Path) -> None:
    env = {**matrix.run_env(tmp_path / "v.jsonl", stop_on_kill=False), matrix.FAULT_ENV: FAULT}
    server = ForkServer(ForkServerSpec(target="harness", preload=()), env, tmp_path / "server.log")
    try:
        with pytest.raises(ForkServerError, match="refused to start: started with SWA_HARNESS_FAULT set"):
            server.ready(timeout_s=300)
    finally:
        server.close()


def test_a_matrix_through_fork_servers_gives_the_verdicts_of_one_of_subprocesses() -> None:
    faults = ["resume-key-drops-env", "resume-key-drops-generation-budget"]
    small = dataclasses.replace(
        TARGET, suites={"reuse": f"{SUITE}::test_changing_one_field_of_the_resume_key_misses_the_cache"}
    )
    forked = matrix.build_matrix(small, faults, jobs=2)
    spawned = matrix.build_matrix(small, faults, jobs=2, fork_server=False)
    assert matrix.compare(forked, spawned) == []
    assert {f.spec.id: f.verdict() for f in forked.faults} == dict.fromkeys(faults, "killed: behavioural")
    cells = [(f.spec.id, s, c) for f in forked.faults for s, c in f.cells.items()]
    assert cells == [(f.spec.id, s, c) for f in spawned.faults for s, c in f.cells.items()]  # killers, messages


def test_a_full_matrix_forks_its_clean_runs_too_with_the_verdicts_of_subprocesses() -> None:
    small = dataclasses.replace(
        TARGET, suites={"reuse": f"{SUITE}::test_changing_one_field_of_the_resume_key_misses_the_cache"}
    )
    forked = matrix.build_matrix(small, [FAULT], jobs=1, mode="full")
    spawned = matrix.build_matrix(small, [FAULT], jobs=1, mode="full", fork_server=False)
    assert forked.clean == spawned.clean and forked.clean["reuse"].status == "passed"
    assert [f.cells for f in forked.faults] == [f.cells for f in spawned.faults]
    assert forked.faults[0].verdict() == "killed: behavioural"


def test_the_warm_up_notes_the_scope_functions_it_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant of a function the server ran while it warmed up is no fork's: the hook names it, and only it."""
    (tmp_path / "toy_warm.py").write_text("def ran():\n    return 1\n\ndef never():\n    return 2\n\nTABLE = ran()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(forkserver, "_scope_files", lambda target: {str(tmp_path / "toy_warm.py"): "toy_warm"})
    try:
        with forkserver._Called("sglang") as called:
            import toy_warm  # noqa: F401
        assert called.seen == {"toy_warm.ran"}
        assert sys.getprofile() is None
    finally:
        sys.modules.pop("toy_warm", None)


@pytest.mark.timeout(120)  # before the ready lock, a waiting thread took a run's answer and the runs hung
def test_threads_that_wait_for_a_warm_up_at_once_leave_the_answers_to_the_runs(tmp_path: Path) -> None:
    """A mutation run's jobs each ask which functions the warm-up ran while the servers warm: one reads the ready
    line, the others wait for it, and no run's answer is taken by a waiting thread."""
    with matrix.start_servers(TARGET, tmp_path, 1) as started:
        with ThreadPoolExecutor(4) as pool:
            asked = list(pool.map(lambda _: started.called(), range(4)))
        assert asked == [frozenset()] * 4  # the harness target has no mutation scope
        argv = matrix.pytest_argv(TARGET, [PASSING])
        with ThreadPoolExecutor(2) as pool:
            runs = list(
                pool.map(
                    lambda i: started.run(argv, _env(tmp_path), timeout_s=300, log=tmp_path / f"{i}.log"), range(2)
                )
            )
        assert [r.returncode for r in runs] == [0, 0]
