"""Compiled CPU kernels for a decode step's costliest torch-op chains, and when the engine uses them.

* ``decode_attention`` (``csrc/decode_attention.cpp``). In torch ops, decode attention gathers every
  key and value row a batch may read, then runs small batched matmuls, soft-cap, mask and softmax
  over the copies: at batch 32 most of the attention time goes to copying rows, and rows past a
  request's length in a graph's KV bucket are copied too. The kernel reads each visible row once from
  the cache. ``attention_backend.attend_over_rows`` stays the readable reference it is tested against.
* ``gelu_tanh_and_mul`` (``csrc/gelu_and_mul.cpp``): a gated MLP's ``gelu_tanh(gate) * up`` in one pass.
* ``rms_norm`` (``csrc/rms_norm.cpp``): an fp32 RMSNorm, optionally added to the residual, in one op
  instead of four or five (``harness/model/norm.py`` is the reference).

Serving engines do the same with their own kernels (FlashInfer or Triton attention, sgl-kernel's
``gelu_tanh_and_mul``). The three are compiled on first use with the machine's C++ compiler
(torch's extension builder: 52-67 s on this project's 2-core machine, measured 2026-11-26; then a load), for the CPU capability
torch itself dispatches to, and each is registered as a torch op, so a graph capture records it as one op.
They are built once per environment (``build_directory``: its build files embed that environment's torch),
by ``swa-harness kernels`` in the nox sessions, else at the first server start. One build
at a time per environment, under a lock the kernel releases when its holder dies (a killed build never
blocks the next one); a process that waits says who holds it and gives up after ``BUILD_WAIT_S``.

Where ``SWA_HARNESS_KERNEL_STORE`` names a folder (the nox sessions set ``.nox/.kernels``), a finished build is also
published there under a key of everything its machine code depends on (``store_key``: the sources' bytes, the flags,
the CPU capability, torch's exact build, the compiler, the Python ABI), and another environment with the same key
loads that library instead of compiling its own: CI's five venvs on one torch compile once, not five times. The
store is written only by an atomic rename of a complete file, so environments never share a lock or a half-written
library; a build that is not in it yet is compiled as before.

What a build is reused under (its key): the environment (``build_directory``: ``sys.prefix``, and torch's version
where the environment cannot hold it), the checkout (the sources' folder), the CPU capability (in the extension's
name), and, through torch's extension builder, the sources' bytes and paths and the compiler flags (a changed
source or flag is rebuilt, under a new version number). In a process, ``_build`` runs once.

Modes (``EngineConfig.cpu_kernels``): ``torch`` never uses them; ``fused`` requires them (a build
failure is an error); ``auto`` uses them for fp32 on CPU when they build, else torch ops, with one
warning naming the reason.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import torch

logger = logging.getLogger(__name__)

KERNEL_MODES = ("auto", "torch", "fused")
SOURCES = tuple(
    Path(__file__).with_name("csrc") / name for name in ("decode_attention.cpp", "gelu_and_mul.cpp", "rms_norm.cpp")
)

# torch's CPU capability -> compiler flags that make ATen's Vectorized<float> the width torch's kernels use.
_CAPABILITY_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"],
}


class KernelUnavailable(RuntimeError):
    """The kernels were required (``cpu_kernels="fused"``) but cannot be used here."""


def _put_ninja_on_path() -> None:
    """torch's builder runs ``ninja`` from PATH; a venv's pip-installed one is not there unless the venv is
    activated (a server started as ``.venv/bin/python -m harness.http_server``)."""
    if shutil.which("ninja") is not None:
        return
    try:
        import ninja
    except ImportError:
        return
    os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


BUILD_WAIT_S = 600.0  # how long a process waits for another's build of the same kernels before using torch ops
_SAY_EVERY_S = 10.0


def build_directory() -> Path:
    """Where this environment's kernels are built: inside the environment (its build files embed this torch's
    paths, so environments must never share one, nor its lock), else a cache folder keyed by the environment;
    one folder per checkout within it (torch's builder keys a build by its sources' paths: two checkouts on one
    environment, a worktree beside the main one, would otherwise rebuild over each other at every switch)."""
    checkout = hashlib.sha256(str(SOURCES[0].parent.resolve()).encode()).hexdigest()[:8]
    inside = Path(sys.prefix) / "share" / "swa-harness" / "kernels"
    if os.access(sys.prefix, os.W_OK) or inside.is_dir():
        return inside / checkout
    key = hashlib.sha256(f"{sys.prefix}|{torch.__version__}".encode()).hexdigest()[:12]
    return (
        Path(os.environ.get("SWA_HARNESS_CACHE", Path.home() / ".cache" / "swa-harness")) / "kernels" / key / checkout
    )


@functools.cache
def _build(verbose: bool = False) -> str | None:
    """Build and load the kernels once per process; None when they loaded, else why not."""
    capability = torch.backends.cpu.get_cpu_capability()
    name = f"swa_harness_cpu_kernels_{capability.lower()}"
    root = build_directory()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with open(root / f"{name}.lock", "a+") as lock:
            if (waited := _take(lock, root / f"{name}.lock")) is not None:
                return waited
            return _build_locked(root / name, name, capability, verbose)
    except OSError as exc:  # a read-only or full disk: torch ops instead
        return f"{type(exc).__name__}: {exc}"


def _take(lock: TextIO, path: Path) -> str | None:
    """Hold ``lock`` (an flock: the kernel drops it when its holder dies, however it dies); None once held, else
    why not. Waits at most BUILD_WAIT_S, saying every few seconds who holds it."""
    start = said = time.monotonic()
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "?"
            now = time.monotonic()
            if now - start > BUILD_WAIT_S:
                return f"waited {BUILD_WAIT_S:g} s for the kernel build lock {path} (held by pid {holder})"
            if now - said >= _SAY_EVERY_S:
                logger.warning(
                    "waiting for the kernel build lock %s: pid %s is building them (%.0f s so far)",
                    path,
                    holder,
                    now - start,
                )
                said = now
            time.sleep(0.2)
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    return None


def _flags(capability: str) -> list[str]:
    return ["-O3", *_CAPABILITY_FLAGS.get(capability, []), f"-DCPU_CAPABILITY={capability}"]


def _compiler() -> str:
    """The C++ compiler's version line (what torch's builder runs: ``$CXX``, else ``c++``); empty if there is none."""
    import subprocess

    try:
        done = subprocess.run(
            [os.environ.get("CXX", "c++"), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.splitlines()[0] if done.returncode == 0 and done.stdout else ""


def store_key(capability: str) -> str:
    """What a compiled library's bytes depend on: two environments with the same key can load each other's build."""
    parts = [
        *(s.read_bytes().hex() for s in SOURCES),
        " ".join(_flags(capability)),
        torch.__version__,
        torch.version.git_version,
        _compiler(),
        sys.implementation.cache_tag,
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _stored(name: str, capability: str) -> Path | None:
    """The shared store's library for this build's key (``SWA_HARNESS_KERNEL_STORE``), None where there is no store."""
    from harness.env import KERNEL_STORE_ENV

    store = os.environ.get(KERNEL_STORE_ENV)
    return Path(store) / store_key(capability) / f"{name}.so" if store else None


def _publish(built: Path, stored: Path) -> None:
    """Put a finished build in the store: copied beside its place, then renamed into it (atomic: a reader sees the
    whole library or none). Best effort: a store that cannot be written only means the next environment compiles."""
    try:
        stored.parent.mkdir(parents=True, exist_ok=True)
        partial = stored.with_name(f".{stored.name}.{os.getpid()}")
        shutil.copyfile(built, partial)
        os.replace(partial, stored)
    except OSError as exc:
        logger.warning("could not publish the CPU kernels to %s: %s", stored, exc)


def _build_locked(directory: Path, name: str, capability: str, verbose: bool) -> str | None:
    from torch.utils.cpp_extension import load  # imports setuptools: only when the kernels are wanted

    stored = _stored(name, capability)
    if stored is not None and stored.is_file():
        start = time.monotonic()
        torch.ops.load_library(str(stored))
        logger.info("CPU kernels loaded from the shared store %s in %.1f s", stored, time.monotonic() - start)
        return None
    _put_ninja_on_path()
    directory.mkdir(parents=True, exist_ok=True)
    baton = directory / "lock"  # torch's own build lock: holding ours, one left here is a killed build's
    if baton.exists():
        logger.warning("removing %s, left by a build that was killed", baton)
        baton.unlink()
    built = (directory / f"{name}.so").exists()
    logger.info(
        "%s the CPU kernels for %s in %s%s",
        "loading" if built else "compiling",
        capability,
        directory,
        "" if built else " (about a minute on 2 cores, once per environment)",
    )
    flags = _flags(capability)
    start = time.monotonic()
    try:
        load(
            name=name,
            sources=[str(s) for s in SOURCES],
            extra_cflags=flags,
            is_python_module=False,
            build_directory=str(directory),
            verbose=verbose,
        )
    except Exception as exc:  # no compiler, no ninja, a header mismatch: the caller decides what it means
        lines = str(exc).strip().splitlines()
        errors = [line.strip() for line in lines if "error" in line.lower()]  # a compiler's first complaint
        return f"{type(exc).__name__}: {(errors or lines or [repr(exc)])[0]}"
    logger.info("CPU kernels %s in %.1f s", "loaded" if built else "compiled", time.monotonic() - start)
    if stored is not None and not stored.is_file():
        _publish(directory / f"{name}.so", stored)
    return None


@dataclass(frozen=True)
class CpuKernels:
    """The ops the engine runs in place of torch-op chains; each None where torch ops run instead."""

    decode_attention: Callable[..., None] | None = None
    gelu_tanh_and_mul: Callable[..., None] | None = None
    rms_norm: Callable[..., None] | None = None

    @property
    def in_use(self) -> str:
        """``fused`` when the compiled kernels run, ``torch`` when torch ops do (what a server reports)."""
        return "torch" if self.decode_attention is None else "fused"


def resolve_kernels(mode: str, *, device: torch.device, dtype: torch.dtype) -> CpuKernels:
    """The kernels ``mode`` gives a model of ``dtype`` on ``device``."""
    if mode not in KERNEL_MODES:
        raise ValueError(f"cpu_kernels must be one of {KERNEL_MODES}, got {mode!r}")
    if mode == "torch":
        return CpuKernels()
    if device.type != "cpu" or dtype != torch.float32:
        if mode == "fused":
            raise KernelUnavailable(f"the CPU kernels run float32 on CPU, not {dtype} on {device}")
        return CpuKernels()
    failure = _build()
    if failure is not None:
        if mode == "fused":
            raise KernelUnavailable(f"the CPU kernels could not be built: {failure}")
        logger.warning(
            "decode attention, the MLP activation and RMSNorm run as torch ops: the CPU kernels could not "
            "be built (%s)",
            failure,
        )
        return CpuKernels()
    ops = torch.ops.harness
    return CpuKernels(ops.decode_attention.default, ops.gelu_tanh_and_mul.default, ops.rms_norm.default)


def main(argv: list[str] | None = None) -> int:
    """``swa-harness kernels``: build this environment's kernels ahead of use, showing the compiler's progress; exit 1
    if they do not build."""
    import argparse

    argparse.ArgumentParser(
        prog="swa-harness kernels", description="build this environment's compiled CPU kernels now"
    ).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    failure = _build(verbose=True)
    if failure is not None:
        print(f"cpu kernels: not built ({failure}); servers will run torch ops (cpu_kernels=auto)", file=sys.stderr)
        return 1
    print(f"cpu kernels: ready in {build_directory()}", file=sys.stderr)
    return 0
