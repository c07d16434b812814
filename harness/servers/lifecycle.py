"""One server lifecycle for every engine: start under the guard, wait until ready, stop as a group.

``launch(command, url=...)`` starts the command as the leader of its own process group (through
``harness.servers.guard``, so it dies with the job, SIGKILL included), copies its output into a log,
and returns once the server answers: readiness is polled on the endpoint (``GET <url>/health`` is
200) *and* on the process (an exit before that is a launch failure), never a fixed sleep. A server
that picks its own port (the harness server with ``--port 0``) prints its URL; ``url_from_line``
finds it in the output. Every failure is a ``ServerLaunchError`` whose ``reason`` is one line and
whose message carries the log's last lines.

This module imports neither torch nor aiohttp: jobs import it, and the guard must start fast.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harness.servers.guard import CHILDREN, ChildProcesses
from harness.paths import REPO

POLL_S = 0.25  # between readiness probes; each probe is bounded too


@dataclass(frozen=True)
class Command:
    """A command line and the variables set over the job's environment for it."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (prefix + " " if prefix else "") + shlex.join(self.argv)

    def to_dict(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "env": dict(sorted(self.env.items()))}

    def resolved(self, python: str = sys.executable) -> list[str]:
        """The argv to run: a leading ``python`` (plans say that, to be machine-independent) is this interpreter."""
        return [python if i == 0 and arg == "python" else arg for i, arg in enumerate(self.argv)]


class ServerLaunchError(RuntimeError):
    """The server process died or never became ready; ``reason`` says which, in one line."""

    def __init__(self, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or message.splitlines()[0]


Transport = Literal["refused", "dropped", "timeout"]


class ServerTransportError(RuntimeError):
    """A request to a running server came back without an answer to judge: ``how`` says whether it was refused (an HTTP
    error status to a request the client built valid), dropped (connection refused, reset or closed: the server died
    or hung up) or timed out. The run has no verdict: not being an ``AssertionError``, the kill matrix counts it an
    error, never a kill (``harness/faults/verdicts.py``)."""

    def __init__(self, how: Transport, message: str) -> None:
        super().__init__(message)
        self.how = how


class ServerProcess:
    """A running server; ``stop()`` (or leaving the ``with`` block) ends its whole process group."""

    def __init__(
        self,
        proc: subprocess.Popen,
        log_path: Path,
        reader: threading.Thread,
        children: ChildProcesses = CHILDREN,
        grace_s: float = 30.0,
    ) -> None:
        self.proc = proc
        self.log_path = log_path
        self.base_url = ""  # "http://127.0.0.1:PORT", set once ready
        self._reader = reader
        self._children = children
        self._grace_s = grace_s

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def completions_url(self) -> str:
        return f"{self.base_url}/v1/completions"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float | None = None) -> int:
        """SIGTERM to its process group, SIGKILL after ``timeout`` seconds (the engine's grace); its exit code."""
        code = self._children.stop(self.proc, grace=self._grace_s if timeout is None else timeout)
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


def answers(url: str, path: str = "/health", timeout: float = 2.0) -> bool:
    """``GET url+path`` answered 200 (SGLang's /health has an empty body, so only the status counts)."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + path, timeout=timeout) as resp:
            return resp.status == 200
    except (OSError, urllib.error.HTTPError, ValueError):
        return False


def launch(
    command: Command,
    *,
    log_path: str | os.PathLike,
    timeout: float,
    url: str | None = None,
    url_from_line: Callable[[str], str | None] | None = None,
    health_path: str = "/health",
    python: str = sys.executable,
    grace_s: float = 30.0,
    children: ChildProcesses = CHILDREN,
) -> ServerProcess:
    """Start ``command`` and return once ``GET <url><health_path>`` answers 200.

    ``url`` is where the server will listen; None when the server reports it (``url_from_line`` reads
    it from a line of its output). The environment is ``os.environ`` with ``command.env`` over it and
    the checkout on PYTHONPATH, so this works without installing the package.
    """
    argv = command.resolved(python)
    env = {**os.environ, **command.env}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_path.write_text(f"$ {command.shell()}\n")

    proc = children.spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=str(REPO))
    found: list[str] = [url] if url else []
    line_seen = threading.Event()
    reader = threading.Thread(
        target=_pump,
        args=(proc, log_path, url_from_line, found, line_seen),
        name=f"server-output-{proc.pid}",
        daemon=True,
    )
    reader.start()
    server = ServerProcess(proc, log_path=log_path, reader=reader, children=children, grace_s=grace_s)

    deadline = time.monotonic() + timeout
    while True:
        if found and answers(found[0], health_path):
            server.base_url = found[0].rstrip("/")
            return server
        if proc.poll() is not None:
            reader.join(2.0)
            server.stop(timeout=5.0)  # whatever is left of its group
            reason = f"exited with code {proc.returncode} before it was ready" + last_error(log_path)
            raise ServerLaunchError(f"server {reason}; log {log_path}:\n{server.log_tail()}", reason=reason)
        if time.monotonic() > deadline:
            server.stop(timeout=5.0)
            where = f"{found[0]}{health_path} never answered" if found else "it never said where it listens"
            reason = f"was not ready after {timeout:g} s ({where}; killed)"
            raise ServerLaunchError(f"server {reason}; log {log_path}:\n{server.log_tail()}", reason=reason)
        line_seen.wait(POLL_S)  # a new line (the URL, a traceback) ends the wait early
        line_seen.clear()


_EXCEPTION = re.compile(r"\b([A-Za-z_][\w.]*(?:Error|Exception)): (\S.*)")
# A wrapper that only points at the real cause (vLLM: "Engine core initialization failed. See root cause above.")
_POINTS_ELSEWHERE = re.compile(r"root cause|see (the )?(stack trace|above|log)", re.I)
ERROR_CHARS = 240  # of a server's last exception in a one-line reason


def last_error(log_path: Path) -> str:
    """``": <exception>: <message>"`` of the last exception line a server wrote (its own words for why it
    stopped, e.g. vLLM's "ValueError: To serve at least one request..."; wrappers that only say to look above are
    passed over), or "" when there is none."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if (found := _EXCEPTION.search(line)) and not _POINTS_ELSEWHERE.search(found[2]):
            text = f"{found[1]}: {found[2].strip()}"
            return ": " + (text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 3] + "...")
    return ""


def _pump(
    proc: subprocess.Popen,
    log_path: Path,
    url_from_line: Callable[[str], str | None] | None,
    found: list[str],
    line_seen: threading.Event,
) -> None:
    """Copy the child's output into the log; the first URL ``url_from_line`` finds is where it listens."""
    assert proc.stdout is not None
    with open(log_path, "ab") as log:
        for raw in proc.stdout:
            log.write(raw)
            log.flush()
            if not found and url_from_line is not None:
                url = url_from_line(raw.decode(errors="replace").strip())
                if url:
                    found.append(url)
            line_seen.set()
