"""Child processes that never outlive the process that started them.

``ChildProcesses.spawn(cmd)`` starts ``python -m harness.servers.guard CMD...`` as the leader of a new
process group, with a pipe as its stdin that nobody writes. The guard runs CMD in that group and
waits for it; it forwards SIGTERM/SIGINT/SIGHUP to it; and when its stdin reaches EOF (the parent
is gone, even by SIGKILL, so the kernel closed the pipe) it ends CMD's whole tree, then kills the
group. The guard is a child subreaper, so every process CMD starts stays below it, including those
in process groups of their own (ninja's compilers); when CMD exits, whatever it left running is ended
too (SIGTERM, SIGKILL after a grace period). The parent stops a child by signalling its group (SIGTERM, then SIGKILL after a grace
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
    return [sys.executable, "-m", "harness.servers.guard", *cmd]


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

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def _become_subreaper() -> None:
    """Orphans of CMD's tree are re-parented to the guard, not to init, so ``_descendants`` still finds them
    (ninja puts each compiler in a process group of its own: a group signal never reaches them)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the group signal is all there is
        pass


def _descendants(root: int) -> list[int]:
    """Every live process below ``root`` (from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])  # the field after the state
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            found.append(pid)
            todo.append(pid)
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"  # a zombie has exited
    except OSError:
        return False


def _end_tree(grace: float = GRACE_S) -> None:
    """SIGTERM every descendant (ninja stops its compilers on SIGTERM), SIGKILL those left after ``grace``."""
    tree = _descendants(os.getpid())
    for pid in tree:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(_alive(pid) for pid in tree) and time.monotonic() < deadline:
        _reap()
        time.sleep(0.05)
    for pid in _descendants(os.getpid()):
        _kill(pid, signal.SIGKILL)
    _reap()


def _kill(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _reap() -> None:
    """Collect exited orphans the guard adopted as subreaper (the CMD itself is waited for by Popen)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _watch_parent(parent_gone: threading.Event) -> None:
    """Block on stdin; EOF means the parent died: end CMD's whole tree, then the guard's group."""
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    parent_gone.set()
    _end_tree()
    os.killpg(0, signal.SIGKILL)


def main(argv: Sequence[str] | None = None) -> int:
    cmd = list(sys.argv[1:] if argv is None else argv)
    if not cmd:
        print("usage: python -m harness.servers.guard CMD [ARG...]", file=sys.stderr)
        return 2
    _become_subreaper()
    child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)

    def forward(signum: int, frame: object) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    parent_gone = threading.Event()
    watcher = threading.Thread(target=_watch_parent, args=(parent_gone,), name="parent-watch", daemon=True)
    watcher.start()
    code = child.wait()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # on its way out with CMD's code: a stop that
        signal.signal(sig, signal.SIG_IGN)  # arrives now (Python resets handlers at exit) must not replace it
    if parent_gone.is_set():  # the watcher is ending the tree: let it finish (it ends this process too)
        watcher.join()
    _end_tree()  # whatever CMD left running (a build it started, its orphans): never outlives the guard
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    raise SystemExit(main())
