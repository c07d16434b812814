"""Test impact for the kill matrices: which tests reach each fault's code, so a fault runs only those.

A fault twin changes named functions (a harness seam, an SGLang function its source edit rewrites; a table seam
changes the owner's methods that read it). A test that never enters one of them cannot see the fault, so a kill
matrix need not run it. Two pytest plugins, both switched on by environment variables:

* **Recording** (``SWA_HARNESS_IMPACT=<target>:<out.json>``, the clean build's run): a global trace function,
  called on each Python frame entry and never per line, notes the faults whose code the frame runs. Attribution
  is conservative, never exact: what runs while a module is collected counts for every test under it; what runs
  in a fixture's set-up counts for every test that uses a fixture of that name; what runs outside any test (the
  session's start) counts for every test; a test that starts a subprocess (whose frames this process cannot see)
  counts as reaching every fault. Threads are traced too, credited to the test running at the time.
* **Selection** (``SWA_HARNESS_SELECT=<file>``, a JSON list of node ids): run only these tests, in this order
  (a fault's last killer first). An entry may also be a node id's part after its last ``/`` (``test_x.py::test_y``,
  how matrices before test impact named a killer). A requested test that was not collected leaves fewer selected; none left is
  pytest's exit 5, which the matrix treats as an error, never as a verdict.

Functions are named ``module.qualname`` (``co_qualname``), so recording needs no import of the code under test:
the SGLang target's edits are matched by their dotted paths before SGLang is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.env import IMPACT_CODE_ENV, IMPACT_ENV, IMPACT_LINES_ENV, SELECT_ENV

EVERY_FAULT = "*"  # recorded for a test that spawned a process: it may reach any fault there


@dataclass(frozen=True)
class Impact:
    """One recording: tests in collection order, each with the faults it reaches (``EVERY_FAULT``: any)."""

    target: str
    tests: tuple[tuple[str, frozenset[str]], ...]
    code: dict[str, tuple[str, ...]]  # fault id -> the functions it changes (module.qualname)

    def reaching(self, fault_id: str) -> list[str]:
        return [nodeid for nodeid, faults in self.tests if fault_id in faults or EVERY_FAULT in faults]

    @classmethod
    def load(cls, path: Path) -> Impact:
        data = json.loads(path.read_text())
        return cls(
            data["target"],
            tuple((t["nodeid"], frozenset(t["faults"])) for t in data["tests"]),
            {fid: tuple(names) for fid, names in data["code"].items()},
        )


# -- what each fault changes ---------------------------------------------------------------------------------


def _function_of(value: Any) -> Any:
    for attr in ("__func__", "fget"):  # staticmethod / classmethod, property
        value = getattr(value, attr, None) or value
    return value if hasattr(value, "__code__") else None


def _names(code: Any) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            yield from _names(const)


def patch_code(owner: type, attr: str) -> set[str]:
    """The functions a harness patch of ``owner.attr`` changes: the seam itself when it is a function, else (a table
    seam) every function of the owner that reads the attribute."""
    fn = _function_of(owner.__dict__[attr])
    if fn is not None:
        return {f"{fn.__module__}.{fn.__code__.co_qualname}"}
    readers = {_function_of(v) for v in owner.__dict__.values()}
    return {
        f"{f.__module__}.{f.__code__.co_qualname}" for f in readers if f is not None and attr in set(_names(f.__code__))
    }


def harness_fault_code() -> dict[str, tuple[str, ...]]:
    from harness.faults import FAULTS

    return {
        fid: tuple(sorted(set().union(*(patch_code(p.owner, p.attr) for p in fault.patches))))
        for fid, fault in FAULTS.items()
    }


def sglang_fault_code() -> dict[str, tuple[str, ...]]:
    from harness.targets.sglang.faults.by_id import SGLANG_FAULTS

    return {fid: tuple(sorted({e.target for e in fault.edits})) for fid, fault in SGLANG_FAULTS.items()}


def vllm_fault_code() -> dict[str, tuple[str, ...]]:
    from harness.targets.vllm.faults.by_id import vllm_fault_code as code

    return code()


FAULT_CODE: dict[str, Callable[[], dict[str, tuple[str, ...]]]] = {
    "harness": harness_fault_code,
    "sglang": sglang_fault_code,
    "vllm": vllm_fault_code,
}


# -- recording -----------------------------------------------------------------------------------------------


class Recorder:
    """The trace function and the scopes it credits: a stack of open scopes, each a set of fault ids."""

    def __init__(self, code: dict[str, tuple[str, ...]], line_files: Iterable[str] = ()) -> None:
        self.code = code
        # Files whose every executed line is credited too, as ``<index in line_files>:<line>`` (a mutation run: a
        # mutant runs only the tests that ran its line); a local trace function on their frames only.
        self.line_files = {path: i for i, path in enumerate(line_files)}
        self.by_name: dict[str, list[str]] = {}
        for fid, names in code.items():
            for name in names:
                self.by_name.setdefault(name, []).append(fid)
        # Every dotted suffix of every name: a frame's qualname is one of them, its module the rest.
        self.suffixes = {".".join(n.split(".")[i:]) for n in self.by_name for i in range(1, n.count(".") + 1)}
        self.stack: list[set[str]] = [set()]  # [0]: outside every test and collector
        self.collectors: dict[str, set[str]] = {}
        self.fixtures: dict[str, set[str]] = {}
        self.tests: dict[str, set[str]] = {}
        self.lock = threading.Lock()  # traced threads credit scopes the main thread opens and closes

    def trace(self, frame: Any, event: str, arg: Any) -> Callable[..., Any] | None:
        code = frame.f_code
        qualname = code.co_qualname
        if qualname in self.suffixes:
            for fid in self.by_name.get(f"{frame.f_globals.get('__name__')}.{qualname}", ()):
                self.credit_all(fid)
        return self.line if code.co_filename in self.line_files else None

    def line(self, frame: Any, event: str, arg: Any) -> Callable[..., Any]:
        if event == "line":
            self.credit_all(f"{self.line_files[frame.f_code.co_filename]}:{frame.f_lineno}")
        return self.line

    def credit_all(self, fault_id: str) -> None:
        """Credit every open scope; outside all of them (``stack[0]``), every test."""
        with self.lock:
            for scope in self.stack[1:] or self.stack:
                scope.add(fault_id)

    def install(self) -> None:
        if sys.gettrace() is not self.trace:  # something (a debugger, hypothesis) replaced it
            sys.settrace(self.trace)
        threading.settrace(self.trace)

    def scope(self, store: dict[str, set[str]], key: str) -> _Scope:
        """Credit a new scope while open; what it reached goes to ``store[key]`` when it closes."""
        return _Scope(self, store, key)

    def result(self, items: Iterable[pytest.Item], target: str) -> dict:
        everywhere = self.stack[0]
        tests = []
        for item in items:
            faults = set(everywhere) | self.tests.get(item.nodeid, set())
            for name in getattr(item, "fixturenames", ()):
                faults |= self.fixtures.get(name, set())
            for prefix, reached in self.collectors.items():
                if _under(item.nodeid, prefix):
                    faults |= reached
            tests.append({"nodeid": item.nodeid, "faults": sorted(faults)})
        return {"target": target, "tests": tests, "code": {fid: list(n) for fid, n in self.code.items()}}


class _Scope:
    """One open scope: credited while open; what it reached is added to its store's entry when it closes."""

    def __init__(self, recorder: Recorder, store: dict[str, set[str]], key: str) -> None:
        self.recorder, self.store, self.key, self.reached = recorder, store, key, set[str]()

    def __enter__(self) -> None:
        with self.recorder.lock:
            self.recorder.stack.append(self.reached)

    def __exit__(self, *exc: object) -> None:
        with self.recorder.lock:  # by identity: two scopes may hold equal sets
            stack = self.recorder.stack
            del stack[max(i for i, s in enumerate(stack) if s is self.reached)]
            self.store.setdefault(self.key, set()).update(self.reached)


def _under(nodeid: str, prefix: str) -> bool:
    return nodeid == prefix or nodeid.startswith((prefix + "/", prefix + "::"))


class RecordingPlugin:
    def __init__(self, target: str, out: Path) -> None:
        self.target, self.out = target, out
        code = os.environ.get(IMPACT_CODE_ENV)  # a mutation run's functions, else the target catalog's faults
        lines = os.environ.get(IMPACT_LINES_ENV)  # a mutation run's files, every line
        self.recorder = Recorder(
            json.loads(Path(code).read_text()) if code else FAULT_CODE[target](),
            json.loads(Path(lines).read_text()) if lines else (),
        )
        self.items: list[pytest.Item] = []
        original_init = subprocess.Popen.__init__
        recorder = self.recorder

        def popen_init(popen: subprocess.Popen, *args: Any, **kwargs: Any) -> None:
            recorder.credit_all(EVERY_FAULT)
            original_init(popen, *args, **kwargs)

        subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
        os.register_at_fork(before=lambda: recorder.credit_all(EVERY_FAULT))
        self.recorder.install()

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Iterator[Any]:
        if not collector.nodeid:  # the session: what runs there is credited to every test already
            return (yield)
        with self.recorder.scope(self.recorder.collectors, collector.nodeid):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Iterator[Any]:
        with self.recorder.scope(self.recorder.fixtures, fixturedef.argname):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> Iterator[Any]:
        self.recorder.install()
        with self.recorder.scope(self.recorder.tests, item.nodeid):
            return (yield)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.items = list(items)

    def pytest_sessionfinish(self) -> None:
        sys.settrace(None)
        threading.settrace(None)  # type: ignore[arg-type]
        self.out.write_text(json.dumps(self.recorder.result(self.items, self.target)))


# -- selection -----------------------------------------------------------------------------------------------


class SelectionPlugin:
    def __init__(self, nodeids: list[str]) -> None:
        self.order = {nodeid: i for i, nodeid in enumerate(nodeids)}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        def rank(item: pytest.Item) -> int | None:
            return self.order.get(item.nodeid, self.order.get(item.nodeid.rsplit("/", 1)[-1]))

        selected = sorted((i for i in items if rank(i) is not None), key=lambda i: rank(i) or 0)
        deselected = [i for i in items if rank(i) is None]
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        items[:] = selected


def _recording_from_env() -> RecordingPlugin | None:
    if not (spec := os.environ.get(IMPACT_ENV)):
        return None
    target, _, out = spec.partition(":")
    return RecordingPlugin(target, Path(out))


# Tracing starts when ``-p harness.faults.impact`` imports this module, before any conftest is imported.
_RECORDING = _recording_from_env()


def pytest_configure(config: pytest.Config) -> None:
    if _RECORDING is not None:
        config.pluginmanager.register(_RECORDING, "swa-impact-recording")
    if select := os.environ.get(SELECT_ENV):
        config.pluginmanager.register(SelectionPlugin(json.loads(Path(select).read_text())), "swa-impact-select")
