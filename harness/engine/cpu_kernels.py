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
(torch's extension builder, cached under ``~/.cache/torch_extensions``: 42 s on this project's 2-core
CI machine, then a load; a checkout at another path builds again), for the CPU capability torch itself
dispatches to, and each is registered as a torch op, so a graph capture records it as one op.

Modes (``EngineConfig.cpu_kernels``): ``torch`` never uses them; ``fused`` requires them (a build
failure is an error); ``auto`` uses them for fp32 on CPU when they build, else torch ops, with one
warning naming the reason.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

KERNEL_MODES = ("auto", "torch", "fused")
SOURCES = tuple(Path(__file__).with_name("csrc") / name
                for name in ("decode_attention.cpp", "gelu_and_mul.cpp", "rms_norm.cpp"))

# torch's CPU capability -> compiler flags that make ATen's Vectorized<float> the width torch's kernels use.
_CAPABILITY_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2"],
}


class KernelUnavailable(RuntimeError):
    """The kernels were required (``cpu_kernels="fused"``) but cannot be used here."""


def _put_ninja_on_path() -> None:
    """torch's builder runs ``ninja`` from PATH; a venv's pip-installed one is not there unless the venv is
    activated (a server started as ``.venv/bin/python -m harness.server``)."""
    if shutil.which("ninja") is not None:
        return
    try:
        import ninja
    except ImportError:
        return
    os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


@functools.cache
def _build() -> str | None:
    """Build and load the kernels once per process; None when they loaded, else why not."""
    from torch.utils.cpp_extension import load  # imports setuptools: only when the kernels are wanted

    _put_ninja_on_path()
    capability = torch.backends.cpu.get_cpu_capability()
    flags = ["-O3", *_CAPABILITY_FLAGS.get(capability, []), f"-DCPU_CAPABILITY={capability}"]
    logger.info("loading the CPU kernels for %s (the first load on a machine compiles them: under a minute)",
                capability)
    try:
        load(name=f"swa_harness_cpu_kernels_{capability.lower()}", sources=[str(s) for s in SOURCES],
             extra_cflags=flags, is_python_module=False, verbose=False)
    except Exception as exc:  # no compiler, no ninja, a header mismatch: the caller decides what it means
        lines = str(exc).strip().splitlines()
        errors = [line.strip() for line in lines if "error" in line.lower()]  # a compiler's first complaint
        return f"{type(exc).__name__}: {(errors or lines or [repr(exc)])[0]}"
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
        logger.warning("decode attention, the MLP activation and RMSNorm run as torch ops: the CPU kernels could not "
                       "be built (%s)", failure)
        return CpuKernels()
    ops = torch.ops.harness
    return CpuKernels(ops.decode_attention.default, ops.gelu_tanh_and_mul.default, ops.rms_norm.default)
