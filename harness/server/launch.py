"""Start ``python -m harness.server`` as a subprocess and wait until it is listening.

The eval orchestrator uses this: ``with launch_server(path, "tape") as server: ... server.base_url``.
The child's stderr (logs, tracebacks) and stdout both go to ``log_path``; a reader thread watches
stdout for the ready line. If the child dies or does not become ready in time, ServerLaunchError
carries the tail of that log, so the cause (a bad checkpoint, a busy port) is in the message.

The server runs under ``harness.server.guard`` in its own process group, owned by a
``ChildProcesses`` registry: it is stopped as a group, and it dies with the launching process
(SIGKILL included), so no server is left listening after the process that started it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.server.guard import CHILDREN, ChildProcesses

READY_PREFIX = "SWA_HARNESS_SERVER_READY"  # printed by cli.serve; defined here because this module must not import torch
_REPO_ROOT = Path(__file__).resolve().parents[2]


class ServerLaunchError(RuntimeError):
    """The server process died or never printed its ready line; ``reason`` says which, in one line."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message.splitlines()[0]


class ServerProcess:
    """A running server subprocess; ``stop()`` (or leaving the ``with`` block) ends it."""

    def __init__(self, proc: subprocess.Popen, log_path: Path, reader: threading.Thread,
                 children: ChildProcesses = CHILDREN) -> None:
        self.proc = proc
        self.log_path = log_path
        self.base_url = ""  # "http://127.0.0.1:PORT", set once ready
        self._reader = reader
        self._children = children

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def completions_url(self) -> str:
        return f"{self.base_url}/v1/completions"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM to its process group, then SIGKILL after ``timeout`` seconds; returns the exit code."""
        code = self._children.stop(self.proc, grace=timeout)
        self._reader.join(5.0)
        return code

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"ServerProcess(pid={self.pid}, base_url={self.base_url!r}, log_path={str(self.log_path)!r})"


def launch_server(
    model_path: str | os.PathLike,
    graphs: str = "auto",
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    max_running: int = 32,
    num_threads: int = 1,
    served_model_name: str | None = None,
    max_context_len: int | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log_path: str | os.PathLike | None = None,
    timeout: float = 300.0,
    python: str = sys.executable,
    children: ChildProcesses = CHILDREN,
) -> ServerProcess:
    """Start the server and return once it printed its ready line.

    ``env`` holds variables layered over ``os.environ`` (a replacement environment would lose PATH
    and the venv); the repo root is put on PYTHONPATH so this works without installing the package.
    ``log_path`` defaults to a fresh temporary file (see ``.log_path``). ``children`` owns the process.
    """
    cmd = [python, "-m", "harness.server", "--model", str(model_path), "--graphs", graphs, "--host", host,
           "--port", str(port), "--max-running", str(max_running), "--num-threads", str(num_threads)]
    if served_model_name is not None:
        cmd += ["--served-model-name", served_model_name]
    if max_context_len is not None:
        cmd += ["--max-context-len", str(max_context_len)]
    cmd += list(extra_args)

    child_env = dict(os.environ)
    child_env.update(env or {})
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), child_env.get("PYTHONPATH")) if p)
    child_env.setdefault("PYTHONUNBUFFERED", "1")

    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="swa-harness-server-", suffix=".log")
        os.close(fd)
        log_path = name
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(f"$ {' '.join(cmd)}\n")

    with open(log_path, "ab") as stderr_log:  # the child keeps its own copy of the descriptor
        proc = children.spawn(cmd, stdout=subprocess.PIPE, stderr=stderr_log, env=child_env, cwd=str(_REPO_ROOT))
    ready: list[str] = []
    ready_event = threading.Event()
    reader = threading.Thread(target=_pump_stdout, args=(proc, log_path, ready, ready_event),
                              name=f"server-stdout-{proc.pid}", daemon=True)
    reader.start()
    server = ServerProcess(proc, log_path, reader, children)

    deadline = time.monotonic() + timeout
    while not ready_event.wait(0.05):
        if proc.poll() is not None:
            reader.join(2.0)  # the ready line may have raced with the exit
            if ready:
                break
            server.stop()  # forget it, and whatever is left of its group
            reason = f"exited with code {proc.returncode} before it was ready"
            raise ServerLaunchError(f"server {reason}; log {log_path}:\n{server.log_tail()}", reason=reason)
        if time.monotonic() > deadline:
            server.stop(timeout=5.0)
            reason = f"was not ready after {timeout:.0f} s (killed)"
            raise ServerLaunchError(f"server {reason}; log {log_path}:\n{server.log_tail()}", reason=reason)
    server.base_url = ready[0]
    return server


def _pump_stdout(proc: subprocess.Popen, log_path: Path, ready: list[str], event: threading.Event) -> None:
    """Copy the child's stdout into the log and report the ready line's URL."""
    assert proc.stdout is not None
    with open(log_path, "ab") as log:
        for raw in proc.stdout:
            log.write(raw)
            log.flush()
            line = raw.decode(errors="replace").strip()
            if not ready and line.startswith(READY_PREFIX + " "):
                ready.append(line.split(" ", 1)[1].strip())
                event.set()
