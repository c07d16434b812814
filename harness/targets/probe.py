"""Asking an installed engine what it has, shared by the SGLang and vLLM capability modules: each turns a ``None``
into its own skip that names the engine and its version."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

# The marker a skip reason carries where the code a suite drives cannot run on this CPU (a Triton kernel, a compiled
# library built for another torch): the release matrices count such skips apart from a release lacking the code.
UNREACHABLE = "CPU-unreachable"
# The junit property a test records where the release could not take part of its drawn space (a feature it lacks left
# out of the draws, the assertions unchanged): the release matrices show such a pass as "narrowed".
NARROWED = "narrowed"


def first_found(*candidates: tuple[str, str]) -> Any | None:
    """The first ``(module, attribute)`` that imports and exists (where something moved between releases), or None."""
    for name, attribute in candidates:
        try:
            found = getattr(importlib.import_module(name), attribute, None)
        except ModuleNotFoundError:
            continue
        if found is not None:
            return found
    return None


def named(candidates: tuple[tuple[str, str], ...]) -> str:
    return " or ".join(f"{name}.{attribute}" for name, attribute in candidates)


def takes(func: Callable[..., Any], parameter: str) -> bool:
    return parameter in inspect.signature(func).parameters
