"""The guard: a child never outlives the job that started it, nor leaves anything it started behind, even what
runs in a process group of its own (ninja puts each compiler in one) and even when the job dies by SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.servers.guard import ChildProcesses

# A stand-in for a server building its kernels: it starts a "compiler" in a new session (its own process group,
# as ninja's are), writes the compiler's pid, and waits.
SERVER = textwrap.dedent("""
    import subprocess, sys, time
    compiler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
    open(sys.argv[1], "w").write(str(compiler.pid))
    time.sleep(300)
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _wait_for(path: Path, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return int(path.read_text())


def _gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")


def test_a_job_killed_by_sigkill_leaves_no_server_and_no_compiler(tmp_path: Path) -> None:
    """The job (a process owning ChildProcesses) is SIGKILLed while its server 'builds': nothing survives."""
    pid_file = tmp_path / "compiler.pid"
    job = textwrap.dedent(f"""
        import sys, time
        from harness.servers.guard import CHILDREN
        CHILDREN.spawn([sys.executable, "-c", {SERVER!r}, {str(pid_file)!r}])
        time.sleep(300)
    """)
    proc = subprocess.Popen([sys.executable, "-c", job], env={**os.environ, "PYTHONPATH": str(Path.cwd())})
    try:
        compiler = _wait_for(pid_file)
        assert _alive(compiler)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert _gone(compiler), f"the compiler {compiler} outlived a SIGKILLed job"
    finally:
        proc.kill()


def test_a_server_that_exits_leaves_nothing_it_started(tmp_path: Path) -> None:
    """The server itself dies (SIGTERM during its build, as a stop does) and its compiler is ended with it."""
    pid_file = tmp_path / "compiler.pid"
    children = ChildProcesses()
    proc = children.spawn([sys.executable, "-c", SERVER, str(pid_file)])
    compiler = _wait_for(pid_file)
    children.stop(proc, grace=10)
    assert _gone(compiler), f"the compiler {compiler} outlived its server"
