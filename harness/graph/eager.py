"""Graphs off: the same capture/replay API, but replay runs the Python callable again."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch


class EagerGraph:
    def __init__(self, fn: Callable[[], Any], output: Any):
        self._fn = fn
        self.output = output

    def replay(self, current_inputs: Mapping[str, torch.Tensor] | None = None) -> Any:
        with torch.no_grad():
            self.output = self._fn()
        return self.output


class EagerBackend:
    """Re-runs Python on every replay, so nothing is frozen; padding and buffers behave as with graphs."""

    name = "eager"

    def capture(self, fn: Callable[[], Any], *, static_inputs: Mapping[str, torch.Tensor]) -> EagerGraph:
        with torch.no_grad():
            return EagerGraph(fn, fn())

    def capture_piecewise(self, fn: Callable[[], Any], *, static_inputs: Mapping[str, torch.Tensor]) -> EagerGraph:
        """No pieces needed: the whole callable (breaks included) re-runs at every replay."""
        return self.capture(fn, static_inputs=static_inputs)
