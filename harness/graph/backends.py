"""Pick a graph backend by name: ``off`` | ``eager`` | ``tape`` | ``cuda`` | ``auto``."""

from __future__ import annotations

from typing import Any, Protocol

import torch

GRAPH_MODES = ("off", "eager", "tape", "cuda", "auto")


class GraphBackend(Protocol):
    name: str

    def capture(self, fn: Any, *, static_inputs: Any) -> Any:
        """A graph object with ``replay(current_inputs)``, each backend its own kind."""

    def capture_piecewise(self, fn: Any, *, static_inputs: Any) -> Any:
        """The same, with every ``graph_break`` in ``fn`` run eagerly between captured pieces."""


def resolve_mode(mode: str, device: torch.device | str = "cpu") -> str:
    """``auto`` means CUDA graphs on a CUDA device and the tape on CPU."""
    if mode not in GRAPH_MODES:
        raise ValueError(f"graph mode must be one of {GRAPH_MODES}, got {mode!r}")
    if mode == "auto":
        return "cuda" if torch.device(device).type == "cuda" else "tape"
    if mode == "cuda" and torch.device(device).type != "cuda":
        raise ValueError("graphs='cuda' needs the model on a CUDA device; use 'tape' or 'auto' on CPU")
    return mode


def make_backend(mode: str) -> GraphBackend:
    if mode == "tape":
        from harness.graph.tape import TapeBackend

        return TapeBackend()
    if mode == "eager":
        from harness.graph.eager import EagerBackend

        return EagerBackend()
    if mode == "cuda":
        from harness.graph.cuda import CudaGraphBackend

        return CudaGraphBackend()
    raise ValueError(f"no graph backend for mode {mode!r} (resolve 'auto' first; 'off' uses no runner)")
