"""Graphs on, GPU: ``torch.cuda.CUDAGraph``, all buckets sharing one memory pool (as SGLang does)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from harness.graph.errors import check_static_inputs, input_addresses
from harness.graph.piecewise import PiecewiseGraph, capture_pieces


class CudaGraph:
    def __init__(self, graph: "torch.cuda.CUDAGraph", output: Any, static_inputs: Mapping[str, torch.Tensor]):
        self._graph = graph
        self.output = output
        self._input_ptrs = input_addresses(static_inputs)

    def replay(self, current_inputs: Mapping[str, torch.Tensor] | None = None) -> Any:
        if current_inputs is not None:
            check_static_inputs(self._input_ptrs, current_inputs)
        self._graph.replay()
        return self.output


class CudaGraphBackend:
    name = "cuda"

    def __init__(self) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("the cuda graph backend needs a CUDA device; use graphs='tape' on CPU")
        self._pool = torch.cuda.graph_pool_handle()
        self._stream = torch.cuda.Stream()

    def capture(self, fn: Callable[[], Any], *, static_inputs: Mapping[str, torch.Tensor]) -> CudaGraph:
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.no_grad(), torch.cuda.graph(graph, pool=self._pool, stream=self._stream):
            output = fn()
        torch.cuda.synchronize()
        return CudaGraph(graph, output, static_inputs)

    def capture_piecewise(self, fn: Callable[[], Any], *, static_inputs: Mapping[str, torch.Tensor]) -> PiecewiseGraph:
        """One ``torch.cuda.CUDAGraph`` per piece, all in the backend's pool, the breaks eager between them."""
        return capture_pieces(CudaSegmenter(self), fn, static_inputs=static_inputs)


class CudaSegmenter:
    """One ``torch.cuda.CUDAGraph`` per piece of a piecewise graph, all in the backend's memory pool."""

    def __init__(self, backend: CudaGraphBackend) -> None:
        self._backend = backend
        self._graph: "torch.cuda.CUDAGraph | None" = None
        self._context = None

    def begin(self) -> None:
        torch.cuda.synchronize()
        self._graph = torch.cuda.CUDAGraph()
        self._context = torch.cuda.graph(self._graph, pool=self._backend._pool, stream=self._backend._stream)
        self._context.__enter__()

    def end(self) -> CudaGraph:
        graph, context, self._graph, self._context = self._graph, self._context, None, None
        if context is not None:
            context.__exit__(None, None, None)
        torch.cuda.synchronize()
        return CudaGraph(graph, None, {}) if graph is not None else _NoPiece()


class _NoPiece:
    def replay(self, current_inputs=None) -> None:
        return None
