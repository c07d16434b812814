"""What the installed SGLang has, asked of SGLang itself (modules, classes, signatures), never of its version string.

The adapters follow SGLang's memory API through its releases by asking here. What a suite needs and the installed
SGLang lacks, or has only as a Triton kernel that cannot run on CPU, raises ``NotOnThisSGLang``: a
``unittest.SkipTest``, so pytest reports the test as skipped with the one-line reason, hypothesis lets it through,
and the release matrix counts it as "not applicable", never as a pass.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import unittest
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from harness.targets.probe import UNREACHABLE as UNREACHABLE  # re-exported: the marker the matrix reads
from harness.targets.probe import first_found, named
from harness.targets.probe import takes as takes  # re-exported: the adapters ask here


class NotOnThisSGLang(unittest.SkipTest):
    """This SGLang lacks what a suite needs, or runs it only on an accelerator."""


def version() -> str:
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def lacks(what: str) -> NotOnThisSGLang:
    return NotOnThisSGLang(f"SGLang {version()} lacks {what}")


# SGLang's kernel packages, built for CUDA only: a release whose module imports one at import time cannot run that
# module on CPU (0.5.11's unified_radix_cache does, through its host memory pool).
CUDA_ONLY_PACKAGES = ("sgl_kernel",)


def module(name: str) -> ModuleType:
    """``sglang.<name>``, or the skip that says this release has no such module, or imports a CUDA-only kernel package
    with it (CPU-unreachable)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as missing:
        if missing.name and name.startswith(missing.name):
            raise lacks(f"the module {name}") from None
        if missing.name in CUDA_ONLY_PACKAGES:
            raise NotOnThisSGLang(
                f"SGLang {version()}'s {name} imports {missing.name}, which has no CPU build: {UNREACHABLE}"
            ) from None
        raise


def first(*candidates: tuple[str, str]) -> Any:
    """The first ``(module, attribute)`` the installed SGLang has: where a class moved between releases."""
    found = first_found(*candidates)
    if found is None:
        raise lacks(named(candidates))
    return found


def method(obj: Any, name: str) -> Callable[..., Any]:
    """``obj.name``, or the skip that names the missing method and its class."""
    found = getattr(obj, name, None)
    if found is None:
        raise lacks(f"{type(obj).__name__}.{name}")
    return found


@contextmanager
def on_cpu(what: str) -> Iterator[None]:
    """Runs SGLang code that some releases implement as a Triton kernel: without a GPU, Triton finds no active
    driver at launch; that, and only that, becomes a skip naming the code as CPU-unreachable."""
    try:
        yield
    except RuntimeError as error:
        if "active drivers" not in str(error):
            raise
        raise NotOnThisSGLang(f"SGLang {version()}'s {what} launches a Triton kernel: {UNREACHABLE}") from None


def parallel_override(runtime_context: ModuleType) -> Callable[..., Any]:
    """``get_parallel().override`` under this release's field names (``num_dp_ranks`` was ``dp_size``)."""
    fields = getattr(runtime_context, "_PARALLEL_FIELDS", None)
    renamed = {"num_dp_ranks": "dp_size"}

    def override(**values: Any) -> Any:
        if fields is not None:
            values = {renamed[k] if k not in fields and renamed.get(k) in fields else k: v for k, v in values.items()}
        return runtime_context.get_parallel().override(**values)

    return override
