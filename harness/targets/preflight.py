"""Before a run against a real engine: can the python that will run it import what the run imports?

An engine that is missing, or whose dependencies do not import, fails every test minutes later with an error that
reads like the code under test breaking (``check`` once matched such a ``ModuleNotFoundError`` to a catalog fault).
``unimportable`` asks a subprocess of that python, with the run's environment, to do the run's first imports: the
engine's setup as the run does it (version check, import shims), then the modules its suites or server import. It
answers in one line, naming the import that failed and the nox session whose venv has it, or None: the run may start.
A module of the engine's own package that a release lacks is no failure: its suites skip what needs it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.paths import REPO


@dataclass(frozen=True)
class Needs:
    """What one kind of run imports: ``setup`` first (Python, as the run does it), then ``modules``."""

    what: str  # the run, in words: "the SGLang memory suites", "an SGLang server"
    package: str  # the engine's own top-level package
    modules: tuple[str, ...]
    builds: str  # the command that builds a venv where they import
    setup: str = ""


SGLANG_SUITES = Needs(
    "the SGLang memory suites",
    package="sglang",
    modules=(
        "sglang.srt.mem_cache.swa_memory_pool",  # the pool and (before 0.5.13) its allocator
        "sglang.srt.mem_cache.radix_cache",
        "sglang.srt.managers.schedule_batch",  # the prefix cache's requests
    ),
    builds="nox -s sglang",
    setup="from harness.targets.target import load_target; load_target('sglang')",  # the suites' ``target`` fixture
)
SGLANG_SERVER = Needs(
    "an SGLang server",
    package="sglang",
    modules=("uvicorn", "fastapi", "xgrammar", "sglang.srt.server_args"),  # its HTTP stack, grammar backend, flags
    builds="nox -s sglang_server",
    setup="from harness.targets.sglang.imports import import_sglang; import_sglang(any_version=True)",
)
VLLM_SUITES = Needs(
    "the vLLM suites",
    package="vllm",
    modules=(
        "vllm.v1.core.kv_cache_utils",
        "vllm.v1.core.single_type_kv_cache_manager",
        "vllm.v1.kv_cache_interface",
        "vllm.v1.request",
        "vllm.v1.utils",
        "harness.targets.vllm.adapters",
    ),
    builds="nox -s vllm",
)
VLLM_SERVER = Needs(
    "a vLLM server", package="vllm", modules=("vllm.entrypoints.openai.api_server",), builds="nox -s vllm"
)
# SGLANG_SERVER, VLLM_SERVER: each server kind's ``start_imports`` (``ServerKind.cannot_start``); ``check``'s smokes.

# What a release overlay takes from its base venv (harness/targets/sglang/releases.py) is every import dependency of
# SGLang (noxfile.py: SGLANG_IMPORT_DEPS, SGLANG_NO_DEPS). A few of them, by import name, that no harness venv without
# SGLang brings: a base lacking one imports no release, which is known before a release is downloaded.
SGLANG_BASE = ("orjson", "pybase64", "msgspec", "zmq", "triton")

# Runs in the probed python: argv[1] is a JSON list of [package, setup, modules]; on the first failure it prints
# "<index>\t<what failed>" and exits 1.
_PROBE = r"""
import importlib, importlib.util, json, sys
for index, (package, setup, modules) in enumerate(json.loads(sys.argv[1])):
    step = f"import {package}"
    try:
        if importlib.util.find_spec(package) is None:
            raise ModuleNotFoundError(f"No module named {package!r}", name=package)
        importlib.import_module(package)  # before the setup, which imports torch: a broken package fails first
        exec(setup)
        for name in modules:
            step = f"import {name}"
            try:
                importlib.import_module(name)
            except ModuleNotFoundError as error:
                if not (error.name or "").startswith(package + "."):
                    raise
    except BaseException as error:
        said = (str(error) if isinstance(error, SystemExit) else f"{type(error).__name__}: {error}").strip()
        print(f"{index}\t{(said.splitlines() or [''])[0]} ({step})", flush=True)
        sys.exit(1)
"""


def base_lacks(modules: Sequence[str] = SGLANG_BASE) -> list[str]:
    """Of ``modules``, those this interpreter cannot find (located, not imported)."""
    return [m for m in modules if importlib.util.find_spec(m) is None]


def unimportable(
    *needs: Needs, python: str = sys.executable, env: Mapping[str, str] | None = None, timeout_s: float = 300.0
) -> str | None:
    """Why ``python`` (with ``env``, default this process's) cannot run ``needs``, in one line; None when it can."""
    spec = json.dumps([[n.package, n.setup, list(n.modules)] for n in needs])
    try:
        done = subprocess.run(
            [python, "-c", _PROBE, spec],
            cwd=REPO,
            env=dict(os.environ if env is None else env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return f"{python} took over {timeout_s:.0f} s to import what {needs[0].what} need"
    except OSError as error:
        return f"{python} does not run: {error}"
    if done.returncode == 0:
        return None
    index, _, said = (done.stdout.strip().splitlines() or [""])[-1].partition("\t")
    if not index.isdigit():  # it died without a word: a crash in an extension module, a signal
        said = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return f"{python} exited {done.returncode} importing what {needs[0].what} need: {said}"
    failed = needs[int(index)]
    return f"{python} cannot run {failed.what}: {said}; `{failed.builds}` builds a venv that can"
