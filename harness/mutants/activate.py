"""pytest plugin for mutation runs: this process imports one engine module from a mutated text, and (the clean
build's runs) notes how long each test took, so that a mutant runs its cheapest reaching tests first.

``SWA_HARNESS_MUTANT=<file.json>`` names the module, its installed file and the mutated source. Loaded with
``-p harness.mutants.activate``, before any conftest imports the engine, it puts a finder first on
``sys.meta_path``: the named module compiles from the mutated text (under the installed file's name, so
tracebacks and test impact see the real path), every other module as usual. Nothing on disk changes, so parallel
runs share one venv. A module imported before the plugin would keep its installed code: that refuses to run,
unless the spec names the one function the mutant changes (``"function"``, set by the runner only for a run forked
from a warm server, ``harness/mutants/swap.py``): then that function's code is swapped.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
from pathlib import Path
from types import CodeType

from harness.env import DURATIONS_ENV, MUTANT_ENV
from harness.mutants.swap import swap_in


class _MutantLoader(importlib.machinery.SourceFileLoader):
    """The installed file's loader, but its code compiled from the mutated text and never from a cached .pyc."""

    def __init__(self, fullname: str, path: str, source: str) -> None:
        super().__init__(fullname, path)
        self.mutated = source

    def get_code(self, fullname: str) -> CodeType:
        return compile(self.mutated, self.path, "exec", dont_inherit=True)


class MutantFinder(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, source: str) -> None:
        self.module, self.source = module, source
        self.loaded = False

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname != self.module:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.origin is None:
            return None
        spec.loader = _MutantLoader(fullname, spec.origin, self.source)
        self.loaded = True
        return spec


def install(module: str, source: str) -> MutantFinder:
    if module in sys.modules:
        raise RuntimeError(f"mutant module {module} was imported before the mutant could be installed")
    finder = MutantFinder(module, source)
    sys.meta_path.insert(0, finder)
    return finder


def _from_env() -> MutantFinder | None:
    """The run's mutant: imported from its text, or, where the module is already imported (a child forked from a
    warm server) and the runner named the one function the mutant changes, swapped into that function."""
    if not (spec := os.environ.get(MUTANT_ENV)):
        return None
    data = json.loads(Path(spec).read_text())
    if data["module"] in sys.modules and data.get("function"):
        swap_in(sys.modules[data["module"]], data["source"], data["function"])
        return None
    return install(data["module"], data["source"])


_FINDER = _from_env()


def pytest_runtest_logreport(report) -> None:  # type: ignore[no-untyped-def]
    """Each test's seconds, set-up and teardown included, one JSON line per phase (the runner sums them)."""
    if path := os.environ.get(DURATIONS_ENV):
        with open(path, "a") as out:
            out.write(json.dumps({"nodeid": report.nodeid, "seconds": report.duration}) + "\n")
