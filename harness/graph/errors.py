"""Errors of graph capture and replay; each names the op or the input at fault."""

from __future__ import annotations


class GraphCaptureError(RuntimeError):
    """An op that needs a host sync or has a data-dependent output shape ran during capture.

    A CUDA graph cannot contain it (capture fails on the GPU), so the CPU tape refuses it too.
    """


class GraphInputReplacedError(RuntimeError):
    """A static input tensor was replaced (a new tensor bound) instead of refilled in place.

    The graph keeps reading the tensor it captured, so the new contents would be silently ignored.
    vLLM checks input addresses for the same reason.
    """
