"""Walking an aten op's arguments for tensors: shared by the op counter and the graph tape."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def iter_tensors(obj: Any) -> Iterator[torch.Tensor]:
    """Every tensor inside an op's arguments (tensors, lists/tuples of them, kwargs dicts).

    A hand-rolled walk: torch's pytree is general but several times slower, and capture calls this
    for every recorded op.
    """
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from iter_tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from iter_tensors(item)


def map_leaves(obj: Any, fn: Any) -> Any:
    """``obj`` with every leaf (anything but a tuple, list or dict) replaced by ``fn(leaf)``."""
    if isinstance(obj, tuple):
        return tuple(map_leaves(o, fn) for o in obj)
    if isinstance(obj, list):
        return [map_leaves(o, fn) for o in obj]
    if isinstance(obj, dict):
        return {k: map_leaves(v, fn) for k, v in obj.items()}
    return fn(obj)
