"""Child processes that never outlive the process that started them.

``ChildProcesses.spawn(cmd)`` starts ``python -m harness.engines.guard CMD...`` as the leader of a new
process group, with a pipe as its stdin that nobody writes. The guard runs CMD in that group and
waits for it; it forwards SIGTERM/SIGINT/SIGHUP to it; and when its stdin reaches EOF (the parent
is gone, even by SIGKILL, so the kernel closed the pipe) it terminates CMD, then kills the whole
group. The parent stops a child by signalling its group (SIGTERM, then SIGKILL after a grace
period), and ``stop_all`` does that for every child, e.g. from a signal handler or at exit.

This module imports neither torch nor aiohttp: the eval imports it, and the guard must start fast.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

GRACE_S = 5.0  # SIGTERM -> SIGKILL


class ChildrenClosed(RuntimeError):
    """The owner is shutting down: no new child is started."""


def guarded(cmd: Sequence[str]) -> list[str]:
    """``cmd`` run under the guard (see the module docstring)."""
    return [sys.executable, "-m", "harness.engines.guard", *cmd]


class ChildProcesses:
    """The children one process owns, each the leader of its own process group."""

    def __init__(self) -> None:
        self._procs: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._atexit = False

    def spawn(self, cmd: Sequence[str], **popen: Any) -> subprocess.Popen:
        """Start ``cmd`` under the guard; ``popen`` goes to Popen (not stdin, which is the guard's pipe)."""
        with self._lock:
            if self._closed:
                raise ChildrenClosed(f"shutting down: not starting {' '.join(cmd)[:80]}")
            proc = subprocess.Popen(guarded(cmd), stdin=subprocess.PIPE, start_new_session=True, **popen)
            self._procs.add(proc)
            if not self._atexit:
                atexit.register(self.stop_all)
                self._atexit = True
        return proc

    def stop(self, proc: subprocess.Popen, grace: float = GRACE_S) -> int:
        """SIGTERM to ``proc``'s group, SIGKILL after ``grace`` seconds; its exit code."""
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
        self._forget(proc)
        return proc.returncode

    def terminate_all(self) -> None:
        """Refuse new children and send SIGTERM to every group now, without waiting (safe in a signal handler)."""
        self._closed = True
        for proc in list(self._procs):
            if proc.returncode is None:
                _signal_group(proc, signal.SIGTERM)

    def stop_all(self, grace: float = GRACE_S) -> None:
        """Refuse new children; stop every running one (SIGTERM, SIGKILL after ``grace`` seconds in all)."""
        self._closed = True
        procs = list(self._procs)
        for proc in procs:
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
            self._forget(proc)

    def reopen(self) -> None:
        """Accept new children again (a test, or a second job in the same process)."""
        self._closed = False

    def _forget(self, proc: subprocess.Popen) -> None:
        with self._lock:
            self._procs.discard(proc)
        if proc.stdin is not None:
            proc.stdin.close()


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(proc.pid, sig)  # the guard leads a group whose id is its pid
    except (ProcessLookupError, PermissionError):
        pass


CHILDREN = ChildProcesses()  # this process's children: servers and lm-eval runs


# -- the guard process -----------------------------------------------------------------------------


def _watch_parent(child: subprocess.Popen) -> None:
    """Block on stdin; EOF means the parent died: stop the child, then kill the whole group."""
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    os.killpg(0, signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    cmd = list(sys.argv[1:] if argv is None else argv)
    if not cmd:
        print("usage: python -m harness.engines.guard CMD [ARG...]", file=sys.stderr)
        return 2
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)

    def forward(signum: int, frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    threading.Thread(target=_watch_parent, args=(child,), name="parent-watch", daemon=True).start()
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main())
