"""The CPU "tape" graph backend: CUDA-graph semantics without a GPU.

Capture runs the callable once under a ``TorchDispatchMode`` that records every aten op with the
very tensors it read and wrote. Replay re-runs exactly those ops on the same tensors, writing each
result into the tensor captured for it; Python does not run again. So, as with a CUDA graph:

* a decision taken in Python during capture (a memo hit, a branch, a shape) is frozen into the tape;
* inputs must be refilled in place (``copy_``) — a newly bound tensor is never seen;
* ops that need the host to look at tensor data (``.item()``, ``nonzero``, boolean-mask indexing,
  data-dependent output shapes, ``tolist()``) cannot be captured and raise ``GraphCaptureError``.

View ops are not replayed (a captured view still aliases its base); in-place and ``out=`` ops are
replayed as recorded; functional ops are replayed through their ``out=`` overload into the captured
output when aten has one, else computed and copied in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.op_args import iter_tensors
from harness.graph.errors import GraphCaptureError, GraphInputReplacedError

aten = torch.ops.aten

_HOST_SYNC_OPS = {
    aten._local_scalar_dense.default: ".item() / int() / bool() of a tensor",
    aten.is_nonzero.default: "bool() of a tensor",
    aten.equal.default: "torch.equal (returns a Python bool)",
    aten.nonzero.default: "nonzero / torch.where(cond) (data-dependent shape)",
    aten.masked_select.default: "masked_select (data-dependent shape)",
    aten._unique2.default: "unique (data-dependent shape)",
    aten.unique_consecutive.default: "unique_consecutive (data-dependent shape)",
    aten.unique_dim.default: "unique (data-dependent shape)",
    aten.bincount.default: "bincount (data-dependent shape)",
}
_SKIP_AT_REPLAY = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default}


def _host_sync_reason(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> str | None:
    if func in _HOST_SYNC_OPS:
        return _HOST_SYNC_OPS[func]
    if func is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
        return "repeat_interleave without output_size (data-dependent shape)"
    if func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default):
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices):
            return "boolean-mask indexing (data-dependent shape)"
    return None


_OUT_VARIANTS: dict[torch._ops.OpOverload, tuple[torch._ops.OpOverload, tuple[str, ...]] | None] = {}


def _out_variant(func: torch._ops.OpOverload) -> tuple[torch._ops.OpOverload, tuple[str, ...]] | None:
    """The overload of ``func`` that takes the same arguments plus ``out=`` tensors, if aten has one."""
    if func in _OUT_VARIANTS:
        return _OUT_VARIANTS[func]
    found = None
    signature = [(a.name, str(a.type)) for a in func._schema.arguments]
    for name in func.overloadpacket.overloads():
        candidate = getattr(func.overloadpacket, name)
        args = candidate._schema.arguments
        outs = tuple(a.name for a in args if a.is_out)
        if outs and [(a.name, str(a.type)) for a in args if not a.is_out] == signature:
            if len(outs) == len(func._schema.returns):
                found = (candidate, outs)
                break
    _OUT_VARIANTS[func] = found
    return found


def _storages(tree: Any) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in iter_tensors(tree)}


@dataclass
class _Step:
    """One recorded op, bound to the tensors it must read and write at replay."""

    func: Callable[..., Any]
    args: tuple
    kwargs: dict


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.steps: list[_Step] = []
        self.ops_seen = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        reason = _host_sync_reason(func, args, kwargs)
        if reason is not None:
            raise GraphCaptureError(f"{func} cannot be captured into a graph: {reason} needs a host sync")
        out = func(*args, **kwargs)
        self.ops_seen += 1
        self._record(func, args, kwargs, out)
        return out

    def _record(self, func, args: tuple, kwargs: dict, out: Any) -> None:
        if func.is_view or func in _SKIP_AT_REPLAY:
            return
        if func._schema.is_mutable:  # in-place or out=: replaying writes into the same tensors
            self.steps.append(_Step(func, args, kwargs))
            return
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if not all(isinstance(o, torch.Tensor) for o in outs):
            raise GraphCaptureError(f"{func} returned a non-tensor value, which a graph cannot replay")
        if _storages(outs) & _storages((args, kwargs)):  # aliases an input: nothing to recompute
            return
        variant = _out_variant(func)
        if variant is not None:
            out_func, out_names = variant
            self.steps.append(_Step(out_func, args, {**kwargs, **dict(zip(out_names, outs))}))
        else:
            multi = isinstance(out, (tuple, list))
            self.steps.append(_Step(_compute_and_copy(func, multi), (outs, args), kwargs))


def _compute_and_copy(func, multi: bool) -> Callable[..., None]:
    def run(outs, args, **kwargs):
        result = func(*args, **kwargs)
        for dst, src in zip(outs, result if multi else (result,)):
            dst.copy_(src)

    return run


def _forbid(name: str):
    def raiser(self, *args, **kwargs):
        raise GraphCaptureError(f"Tensor.{name}() cannot be captured into a graph: it reads tensor data on the host")

    return raiser


class TapeGraph:
    """A captured tape: ``replay()`` re-runs the recorded ops; ``output`` is what capture returned."""

    def __init__(self, steps: list[_Step], output: Any, static_inputs: Mapping[str, torch.Tensor], ops_seen: int):
        self._steps = steps
        self.output = output
        self._input_ptrs = {name: t.data_ptr() for name, t in static_inputs.items()}
        self.ops_seen = ops_seen

    @property
    def num_steps(self) -> int:
        return len(self._steps)

    def check_inputs(self, current: Mapping[str, torch.Tensor]) -> None:
        for name, ptr in self._input_ptrs.items():
            now = current.get(name)
            if now is None or now.data_ptr() != ptr:
                got = "missing" if now is None else f"data_ptr {now.data_ptr():#x}"
                raise GraphInputReplacedError(
                    f"static input '{name}' was replaced since capture (captured data_ptr {ptr:#x}, now {got}); "
                    "refill it in place with copy_() instead"
                )

    def replay(self, current_inputs: Mapping[str, torch.Tensor] | None = None) -> Any:
        if current_inputs is not None:
            self.check_inputs(current_inputs)
        with torch.no_grad():
            for step in self._steps:
                step.func(*step.args, **step.kwargs)
        return self.output


class TapeBackend:
    """Graphs on, CPU: record once, replay the ops without Python."""

    name = "tape"

    def capture(self, fn: Callable[[], Any], *, static_inputs: Mapping[str, torch.Tensor]) -> TapeGraph:
        segment = TapeSegmenter()
        segment.begin()
        try:
            output = fn()
        finally:
            piece = segment.end()
        return TapeGraph(piece._steps, output, static_inputs, piece.ops_seen)

    def segmenter(self) -> "TapeSegmenter":
        return TapeSegmenter()


class TapeSegmenter:
    """Records one piece of a piecewise graph at a time (``harness.graph.piecewise``)."""

    def __init__(self) -> None:
        self._recorder: _Recorder | None = None
        self._saved: tuple | None = None
        self._grad = torch.no_grad()

    def begin(self) -> None:
        self._saved = torch.Tensor.tolist, torch.Tensor.numpy
        torch.Tensor.tolist, torch.Tensor.numpy = _forbid("tolist"), _forbid("numpy")
        self._recorder = _Recorder()
        self._grad.__enter__()
        self._recorder.__enter__()

    def end(self) -> TapeGraph:
        recorder, self._recorder = self._recorder, None
        if recorder is None:  # already ended (a break failed between pieces)
            return TapeGraph([], None, {}, 0)
        recorder.__exit__(None, None, None)
        self._grad.__exit__(None, None, None)
        torch.Tensor.tolist, torch.Tensor.numpy = self._saved
        return TapeGraph(recorder.steps, None, {}, recorder.ops_seen)
