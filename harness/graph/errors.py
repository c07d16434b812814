"""Errors of graph capture and replay; each names the op or the input at fault."""

from __future__ import annotations

from collections.abc import Mapping

import torch


class GraphCaptureError(RuntimeError):
    """An op that needs a host sync or has a data-dependent output shape ran during capture.

    A CUDA graph cannot contain it (capture fails on the GPU), so the CPU tape refuses it too.
    """


class GraphInputReplacedError(RuntimeError):
    """A static input tensor was replaced (a new tensor bound) instead of refilled in place.

    The graph keeps reading the tensor it captured, so the new contents would be silently ignored.
    vLLM checks input addresses for the same reason.
    """


def input_addresses(static_inputs: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """What a graph remembers of its static inputs: each one's address at capture."""
    return {name: t.data_ptr() for name, t in static_inputs.items()}


def check_static_inputs(captured: Mapping[str, int], current: Mapping[str, torch.Tensor]) -> None:
    """Raise ``GraphInputReplacedError`` unless every captured input is still the tensor the graph reads."""
    for name, ptr in captured.items():
        now = current.get(name)
        if now is None or now.data_ptr() != ptr:
            got = "missing" if now is None else f"data_ptr {now.data_ptr():#x}"
            raise GraphInputReplacedError(
                f"static input '{name}' was replaced since capture (captured data_ptr {ptr:#x}, now {got}); "
                "refill it in place with copy_() instead"
            )
