"""A fork server for the kill matrix's pytest runs that record nothing (fault runs; the clean build's runs in
``--mode full``): one warm process per parallel job imports what every run needs once, then forks a child per run.

Why: a fresh ``python -m pytest`` costs 40-50 s on the SGLang target before its one selected test runs (importing
torch, transformers and SGLang ~26 s, collection ~10 s) while that test takes a few seconds (docs/BENCHMARKS.md,
"8 s per fault is not met"). The server pays the imports and the collection once; each run is a fork.

What a child does is what the subprocess did: the same pytest argv (``pytest.main``), the same environment (the
run's, set whole in the child), the same working folder, its output to a log; it exits with pytest's code and
the server answers with it. A child that dies of a signal, or exits without ``pytest.main`` returning, is an
error naming that, never a code a verdict is read from; a child past its time limit is killed with its process
group, and the client raises ``ForkRunTimeout`` (a ``subprocess.TimeoutExpired``, as ``subprocess.run`` raises).

Where the faults go on, and why the parent never holds one:

* the harness's catalog faults: the root ``conftest.py``'s ``pytest_configure`` (``harness.faults.activate_from_env``)
  in each child's own pytest session (pytest imports that conftest anew in every session: it is no package's);
* SGLang's: the ``SGLangTarget`` built by the suites' ``target`` / ``sglang_target`` fixtures, in the child's tests;
* vLLM's: ``suites/vllm/conftest.py`` when it is imported, a module a warm parent would import once: so the vLLM
  target runs subprocesses (``MatrixTarget.fork_server``);
* a mutation run's mutant: ``harness.mutants.activate`` in the child swaps the one function it changes
  (``harness/mutants/swap.py``), only for a function the server did not call while it warmed up (``called``:
  what it built then was built by the installed code); any other mutant runs in a fresh process.

The parent's environment has no fault variable, its preload runs no test (collection only) and it checks, before
it answers ready and after every run, that no catalog fault is applied in it (``fault_state``: harness seams
holding a twin, SGLang functions whose code is not the code it saw at start) and no mutant (the mutation scope's
functions hold the code they held when it was ready). The ``-p`` plugins of a run
(``harness.faults.verdicts``, ``harness.faults.impact``: both read the environment when imported) are dropped from
``sys.modules`` in each child, so they are imported in the child as in a fresh process.

Torch in the parent: imports only, one intra-op thread (the root conftest sets it when collection imports it), no
op that starts a thread pool; forking after such a parent is what torch's own DataLoader workers do. A forked child
cannot take a setting that is read when the interpreter starts (``START_ONLY``): a run whose environment differs
there from the server's is refused with the variable named.

    python -m harness.faults.forkserver --target sglang [--preload PATH ...]   # the server (the matrix starts it)
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from inspect import CO_OPTIMIZED
from pathlib import Path
from queue import Queue
from typing import IO, Any, Literal

from harness.env import (
    FAULT_ENV,
    IMPACT_CODE_ENV,
    IMPACT_ENV,
    IMPACT_LINES_ENV,
    MUTANT_ENV,
    SGLANG_FAULT_ENV,
    SGLANG_PATCH_ENV,
    VLLM_FAULT_ENV,
)
from harness.paths import REPO

# Read once when the interpreter (or torch) starts: a forked child keeps the server's value.
START_ONLY = (
    "PYTHONHASHSEED",
    "PYTHONPATH",
    "PYTHONSAFEPATH",
    "PYTHONNOUSERSITE",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONWARNINGS",
    "PYTHONUTF8",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
)
# What no server may start under: a fault or patch switched on in the parent would be in every child.
NEVER_IN_SERVER = (FAULT_ENV, SGLANG_FAULT_ENV, VLLM_FAULT_ENV, SGLANG_PATCH_ENV, MUTANT_ENV, IMPACT_ENV)
# Runs that record (test impact, executed lines) stay subprocesses: their tracing starts when the plugin is imported.
RECORDING_ENV = (IMPACT_ENV, IMPACT_CODE_ENV, IMPACT_LINES_ENV)
READY_TIMEOUT_S = 900.0  # imports and collection of a cold SGLang venv on a loaded machine
ANSWER_MARGIN_S = 60.0  # past a run's limit: the server kills and answers within this, or it is dead itself
OUTPUT_TAIL = 4000

ChildEnd = Literal["exited", "signal", "timeout", "refused"]


class ForkServerError(RuntimeError):
    """The fork server, or a child it forked, failed in a way that is no pytest exit code: the message says how."""


class ForkRunTimeout(subprocess.TimeoutExpired):
    """A forked pytest run passed its time limit; its process group was killed (the message says which)."""

    def __init__(self, cmd: Sequence[str], timeout: float, output: str, pid: int) -> None:
        super().__init__(list(cmd), timeout, output=output)
        self.pid = pid

    def __str__(self) -> str:
        return (
            f"forked pytest run (child pid {self.pid}) passed its limit of {self.timeout:g} s and was killed with its "
            f"process group: {' '.join(self.cmd)}"
        )


@dataclass(frozen=True)
class ForkedRun:
    """One run through a fork server: pytest's exit code, the tail of its output, its wall seconds (from the request
    to the answer: a warm server's, without its warm-up)."""

    returncode: int
    output: str
    wall_s: float


@dataclass(frozen=True)
class ForkServerSpec:
    """What a server preloads: the target (``sglang`` imports SGLang first) and the suite paths it collects with
    the target's pytest arguments; its working folder (where the runs' paths are relative to)."""

    target: str
    preload: tuple[str, ...]
    pytest_args: tuple[str, ...] = ()
    cwd: Path = REPO


# ---------------------------------------------------------------- client (the matrix's side)


class _Lines:
    """Whole lines from a pipe, each read before a deadline (a buffered reader would hide a second line from
    ``select``)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.fd = stream.fileno()
        self.buffer = b""

    def read(self, timeout_s: float) -> bytes | None:
        """One line; None at end of file; ``TimeoutError`` when none came in ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise TimeoutError(f"no answer in {timeout_s:g} s")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


def _tail(path: Path, n: int = OUTPUT_TAIL) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError as error:
        return f"(no output: {error})"


def server_env(environ: Mapping[str, str], per_run: Iterable[str]) -> dict[str, str]:
    """A server's environment: the runs' environment without what each run sets itself (``per_run``)."""
    drop = set(per_run) | set(RECORDING_ENV)
    return {k: v for k, v in environ.items() if k not in drop}


class ForkServer:
    """One server process (started at once, warm when ``ready`` returns) and the runs it forks, one at a time."""

    def __init__(self, spec: ForkServerSpec, env: Mapping[str, str], log: Path) -> None:
        self.spec, self.log = spec, log
        self._env = dict(env)
        cmd = [sys.executable, "-m", "harness.faults.forkserver", "--target", spec.target]
        cmd += [arg for path in spec.preload for arg in ("--preload", path)]
        cmd += [f"--pytest-arg={a}" for a in spec.pytest_args]  # one word: a value may start with "--"
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                cmd, cwd=spec.cwd, env=self._env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err
            )
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self._lines = _Lines(self.proc.stdout)
        self.ready_s: float | None = None
        self.threads: int | None = None  # the server's own threads when it was ready (its torch and SGLang imports')
        self.called: frozenset[str] = frozenset()  # mutation-scope functions (module.qualname) its warm-up ran
        self._child: int | None = None
        self._ready_lock = threading.Lock()  # one reader of the ready line: a second would take a run's answer

    def _dead(self, doing: str) -> ForkServerError:
        code = self.proc.poll()
        how = f"exited {code}" if code is not None else "stopped answering"
        return ForkServerError(
            f"fork server for {self.spec.target} (pid {self.proc.pid}) {how} {doing}; its log {self.log}:\n"
            f"{_tail(self.log)}"
        )

    def _answer(self, timeout_s: float, doing: str) -> dict[str, Any]:
        try:
            line = self._lines.read(timeout_s)
        except TimeoutError:
            self.kill()
            raise self._dead(f"{doing} (no answer in {timeout_s:g} s; killed)") from None
        if line is None:
            raise self._dead(doing)
        return json.loads(line)

    def _ask(self, request: Mapping[str, Any], timeout_s: float, doing: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._dead(doing) from None
        return self._answer(timeout_s, doing)

    def ready(self, timeout_s: float = READY_TIMEOUT_S) -> float:
        """Wait for the preload; its seconds. Raises ``ForkServerError`` when it failed (its log says why). Any
        thread may ask, while another runs on the server: only the first reads the pipe."""
        with self._ready_lock:
            if self.ready_s is None:
                answer = self._answer(timeout_s, "before it was ready (imports and collection)")
                if "ready" not in answer:
                    raise ForkServerError(f"fork server for {self.spec.target} refused to start: {answer.get('error')}")
                self.ready_s, self.threads = float(answer["ready"]), int(answer["threads"])
                self.called = frozenset(answer.get("called", ()))
            return self.ready_s

    def state(self) -> list[str]:
        """The catalog faults applied in the server's own process (``fault_state``): always empty unless broken."""
        self.ready()
        return list(self._ask({"op": "state"}, ANSWER_MARGIN_S, "asked for its state")["applied"])

    def run(
        self, argv: Sequence[str], env: Mapping[str, str], *, timeout_s: float, log: Path, cwd: Path | None = None
    ) -> ForkedRun:
        """``pytest.main(argv)`` in a forked child under ``env`` (whole), in ``cwd`` (the server's by default)."""
        self.ready()
        for name in START_ONLY:
            if env.get(name) != self._env.get(name):
                raise ForkServerError(
                    f"{name}={env.get(name)!r} cannot take effect in a forked child: the fork server started with "
                    f"{name}={self._env.get(name)!r} (read when the interpreter starts); run it as a subprocess"
                )
        if recording := [name for name in RECORDING_ENV if env.get(name)]:
            raise ForkServerError(f"a run that records ({', '.join(recording)}) must be a subprocess, not a fork")
        request = {
            "op": "run",
            "argv": list(argv),
            "env": dict(env),
            "cwd": str(cwd or self.spec.cwd),
            "log": str(log),
            "timeout_s": timeout_s,
        }
        doing = f"while running pytest {' '.join(argv)}"
        start = time.perf_counter()  # the server is warm: its warm-up is no run's
        started = self._ask(request, ANSWER_MARGIN_S, doing)
        if "refused" in started:
            raise ForkServerError(f"fork server refused the run: {started['refused']}")
        self._child = int(started["pid"])
        try:
            end = self._answer(timeout_s + ANSWER_MARGIN_S, doing)
        except ForkServerError:
            self._kill_child()
            raise
        self._child = None
        output = _tail(log)
        if applied := end.get("applied"):
            self.kill()
            raise ForkServerError(f"fork server's own process holds a fault after a run ({applied}): stopped")
        how: ChildEnd = end["end"]
        if how == "timeout":
            raise ForkRunTimeout(cmd=argv, timeout=timeout_s, output=output, pid=int(started["pid"]))
        if how == "signal":
            try:
                name = signal.Signals(end["signal"]).name
            except ValueError:
                name = "(unnamed)"
            raise ForkServerError(
                f"forked pytest run (child pid {started['pid']}) died of signal {end['signal']} {name}: "
                f"{' '.join(argv)}\n{output}"
            )
        if end.get("reported") != end["code"]:
            raise ForkServerError(
                f"forked pytest run (child pid {started['pid']}) exited {end['code']} before pytest.main returned "
                f"(a test or the code under test ended the process): {' '.join(argv)}\n{output}"
            )
        return ForkedRun(int(end["code"]), output, time.perf_counter() - start)

    def _kill_child(self) -> None:
        if self._child is not None:
            try:
                os.killpg(self._child, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._child = None

    def kill(self) -> None:
        self._kill_child()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        """End the server (end of its input), killed if it does not end within a few seconds."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


class ForkServers:
    """``jobs`` servers, one per parallel job, all started by the first run (none when no run comes): ``run`` takes a
    free one (a run at a time each)."""

    def __init__(self, spec: ForkServerSpec, env: Mapping[str, str], workdir: Path, jobs: int) -> None:
        self.spec, self._env, self._workdir, self.jobs = spec, dict(env), workdir, max(1, jobs)
        self.servers: list[ForkServer] = []
        self._free: Queue[ForkServer] = Queue()
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> list[ForkServer]:
        with self._lock:
            if self._closed:
                raise ForkServerError("fork servers already closed")
            if not self.servers:
                logs = [self._workdir / f"forkserver-{i}.log" for i in range(self.jobs)]
                self.servers = [ForkServer(self.spec, self._env, log) for log in logs]
                for server in self.servers:
                    self._free.put(server)
        return self.servers

    def run(
        self, argv: Sequence[str], env: Mapping[str, str], *, timeout_s: float, log: Path, cwd: Path | None = None
    ) -> ForkedRun:
        self.start()
        server = self._free.get()
        try:
            return server.run(argv, env, timeout_s=timeout_s, log=log, cwd=cwd)
        finally:
            self._free.put(server)

    def ready(self) -> list[float]:
        """Start the servers and wait for each to be warm: their seconds to warm."""
        return [server.ready() for server in self.start()]

    def called(self) -> frozenset[str]:
        """The mutation-scope functions any server ran while it warmed up (``module.qualname``): a mutant of one of
        them is no fork's (the warm-up built what it built with the installed code)."""
        self.ready()
        return frozenset().union(*(server.called for server in self.servers))

    def close(self) -> None:
        with self._lock:
            self._closed = True
        for server in self.servers:
            server.close()

    def __enter__(self) -> ForkServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------- server (the warm parent)


class _Faults:
    """What a catalog fault changes in this process, seen at start, to tell later whether any is applied."""

    def __init__(self, target: str) -> None:
        from harness.faults import FAULTS

        self.seams = [(f.id, p) for f in FAULTS.values() for p in f.patches]
        self.sglang: dict[str, Any] = {}
        if target == "sglang":
            from harness.targets.sglang.faults.base import resolve
            from harness.targets.sglang.faults.by_id import SGLANG_FAULTS

            for fault in SGLANG_FAULTS.values():
                for edit in fault.edits:
                    fn = resolve(edit.target)  # imports the module: part of the preload
                    fn = getattr(fn, "__func__", fn)
                    self.sglang[edit.target] = (fn, fn.__code__)
        self.scope = _scope_functions(target)

    def applied(self) -> list[str]:
        from harness.faults import base

        found = [
            f"harness fault {fid} at {p.owner.__qualname__}.{p.attr}"
            for fid, p in self.seams
            if p.owner.__dict__.get(p.attr) is p.replacement
        ]
        if base._active:
            found.append(f"harness.faults.base holds {len(base._active)} active patch(es)")
        for target, (fn, code) in self.sglang.items():
            # source_patcher compiles the edited function alone: its code starts at line 1, the file's never does
            if fn.__code__ is not code or code.co_firstlineno == 1:
                found.append(f"SGLang {target} has code other than the installed source's")
        found += [f"mutated {name}" for name, (fn, code) in self.scope.items() if fn.__code__ is not code]
        found += [f"{name}={os.environ[name]}" for name in NEVER_IN_SERVER if os.environ.get(name)]
        return found


def _scope_files(target: str) -> dict[str, str]:
    """The installed files of ``target``'s mutation scope (``harness/mutants/scope.py``): path -> module."""
    from harness.mutants.scope import SCOPES

    files = {}
    for scope in SCOPES.get(target, ()):  # type: ignore[call-overload]
        try:
            files[str(scope.path())] = scope.module
        except LookupError:  # the engine is not installed here: nothing of it can be mutated
            continue
    return files


def _scope_functions(target: str) -> dict[str, tuple[Any, Any]]:
    """Every function of the mutation scope's imported modules (``module.qualname`` -> (function, its code))."""
    from harness.mutants.swap import functions_of

    found = {}
    for module in _scope_files(target).values():
        if module in sys.modules:
            for fn in functions_of(sys.modules[module]):
                found[f"{module}.{fn.__code__.co_qualname}"] = (fn, fn.__code__)
    return found


class _Called:
    """A profile hook over the warm-up: which functions of the mutation scope's files ran (their outermost function,
    as ``module.qualname``; module and class bodies are never swapped, so not noted)."""

    def __init__(self, target: str) -> None:
        self.files = _scope_files(target)
        self.seen: set[str] = set()

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" and (module := self.files.get(frame.f_code.co_filename)) is not None:
            if frame.f_code.co_flags & CO_OPTIMIZED:
                self.seen.add(f"{module}.{frame.f_code.co_qualname.split('.<locals>')[0]}")

    def __enter__(self) -> _Called:
        self.before = (sys.getprofile(), threading.getprofile())
        if self.files:
            sys.setprofile(self)
            threading.setprofile(self)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.files:
            sys.setprofile(self.before[0])
            threading.setprofile(self.before[1])  # type: ignore[arg-type]


def _preload(spec: ForkServerSpec, log: IO[str]) -> None:
    """Import what every run imports: SGLang (target ``sglang``) and, by a collection-only pytest session (the
    assertion rewriting of a real session), the conftests and test modules of ``spec.preload``."""
    import torch

    fresh_rng = torch.get_rng_state()
    if spec.target == "sglang":
        from harness.targets.sglang.imports import import_sglang

        import_sglang()
        import harness.targets.sglang  # noqa: F401 - the target's adapters
    if spec.preload:
        import pytest

        args = ["--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *spec.preload, *spec.pytest_args]
        code = pytest.main(args)
        if code != 0:  # the children collect again and meet the same problem as a subprocess would
            print(f"forkserver: preload collection exited {int(code)} (children will collect anew)", file=log)
    if torch.get_num_threads() != 1:  # the root conftest sets one; keep the parent from any thread pool
        torch.set_num_threads(1)
    if not torch.equal(torch.get_rng_state(), fresh_rng):  # a child starts from a fresh process's torch generator
        print("forkserver: the preload drew from torch's generator: put back as a fresh process has it", file=log)
        torch.set_rng_state(fresh_rng)


def _child(request: Mapping[str, Any], proto: tuple[int, int], status_w: int) -> None:
    """In the forked child: the run's log, folder and environment, then ``pytest.main``; never returns."""
    code = 70
    try:
        os.setpgid(0, 0)
        for fd in proto:
            os.close(fd)
        out = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.chdir(request["cwd"])
        random.seed()  # a fresh process's unseeded generators, not the parent's state shared by every child
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        os.environ.clear()
        os.environ.update(request["env"])
        argv = list(request["argv"])
        plugins = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-p" and not argv[i + 1].startswith("no:")]
        for name in plugins:  # imported in the child, as in a fresh process (they read the environment then)
            sys.modules.pop(name, None)
        import pytest

        sys.argv = [pytest.__file__, *argv]
        code = int(pytest.main(argv))
        sys.stdout.flush()
        sys.stderr.flush()
        os.write(status_w, f"{code}\n".encode())
    except BaseException:  # noqa: BLE001 - whatever it was, the child must end here, not in the server's loop
        try:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code if code != 0 else 70)
    os._exit(code)


def _wait(pid: int, timeout_s: float) -> tuple[int | None, bool]:
    """The child's wait status, or (None, True) once ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status, False
            left = deadline - time.monotonic()
            if left <= 0:
                return None, True
            if pidfd is not None:
                select.select([pidfd], [], [], left)
            else:
                time.sleep(min(0.02, left))
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _run(request: Mapping[str, Any], proto: tuple[int, int], send: Any) -> dict[str, Any]:
    status_r, status_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        os.close(status_r)
        _child(request, proto, status_w)
    os.close(status_w)
    try:
        os.setpgid(pid, pid)
    except OSError:  # the child set it already, or is gone
        pass
    try:
        send({"pid": pid})
        status, timed_out = _wait(pid, float(request["timeout_s"]))
    except BaseException:  # the server is going down (its client gone, an interrupt): its child goes with it
        os.killpg(pid, signal.SIGKILL)
        raise
    if timed_out:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    with os.fdopen(status_r) as reported:
        said = reported.read().strip()
    wall = round(time.perf_counter() - start, 3)
    if timed_out:
        return {"end": "timeout", "wall_s": wall}
    assert status is not None
    if os.WIFSIGNALED(status):
        return {"end": "signal", "signal": os.WTERMSIG(status), "wall_s": wall}
    return {"end": "exited", "code": os.WEXITSTATUS(status), "reported": int(said) if said else None, "wall_s": wall}


def serve(spec: ForkServerSpec) -> int:
    """The server's loop over its standard input (a JSON request a line), answering on its standard output."""
    proto_in, proto_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)  # whatever an import prints goes to the log, never into the answers
    answers = os.fdopen(proto_out, "w")

    def send(message: Mapping[str, Any]) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    held = [name for name in NEVER_IN_SERVER if os.environ.get(name)]
    if held:
        send({"error": f"started with {', '.join(held)} set: a fault in the parent would be in every child"})
        return 2
    start = time.perf_counter()
    with _Called(spec.target) as called:
        _preload(spec, sys.stderr)
    faults = _Faults(spec.target)
    if applied := faults.applied():
        send({"error": f"a fault is applied in the parent after its preload: {'; '.join(applied)}"})
        return 2
    threads = len(os.listdir("/proc/self/task"))
    send({"ready": round(time.perf_counter() - start, 1), "threads": threads, "called": sorted(called.seen)})
    with os.fdopen(proto_in, "rb") as requests:
        for line in requests:
            request = json.loads(line)
            if request["op"] == "state":
                send({"applied": faults.applied()})
            elif request["op"] == "run":
                end = _run(request, (proto_in, proto_out), send)
                send({**end, "applied": faults.applied()})
            else:
                send({"refused": f"unknown op {request['op']!r}"})
    return 0


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness.faults.forkserver", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--preload", action="append", default=[], help="a suite path to collect once")
    parser.add_argument("--pytest-arg", action="append", default=[], help="the target's pytest arguments")
    args = parser.parse_args(argv)
    spec = ForkServerSpec(
        target=args.target, preload=tuple(args.preload), pytest_args=tuple(args.pytest_arg), cwd=Path.cwd()
    )
    return serve(spec)


if __name__ == "__main__":
    raise SystemExit(main())
