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

Replay cost per op is kept low, since a decode step of a small model is hundreds of tiny ops: each
step is bound once at capture into a zero-argument callable (no argument unpacking or kwargs merging
at replay), through torch's generated Python binding of the op where one calls exactly the recorded
overload (checked once per overload and argument kinds, else the overload itself is called, whose
generic schema matching costs more); and a whole-graph capture drops the steps that are constants
(an op with no tensor inputs, such as ``arange``, whose output nothing in the graph writes again).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.op_args import iter_tensors
from harness.graph.errors import GraphCaptureError, check_static_inputs, input_addresses

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


# torch's generated Python bindings for the ops a model's step is made of. Each calls the aten overload
# through the dispatcher like ``OpOverload.__call__`` does, but parses its arguments far more cheaply.
# A binding stands in for a recorded overload only after a probe saw it dispatch exactly that overload
# for the same kinds of arguments (``_binding_for``); mutating ops are not probed (running them twice is
# not harmless), so only these two, whose bindings have a single overload, are mapped.
_BINDINGS: dict[torch._ops.OpOverload, Callable[..., Any]] = {
    aten.add.out: torch.add,
    aten.sub.out: torch.sub,
    aten.mul.out: torch.mul,
    aten.div.out: torch.div,
    aten.neg.out: torch.neg,
    aten.pow.Tensor_Scalar_out: torch.pow,
    aten.rsqrt.out: torch.rsqrt,
    aten.tanh.out: torch.tanh,
    aten.mean.out: torch.mean,
    aten.linalg_vector_norm.out: torch.linalg.vector_norm,
    aten.addcmul.out: torch.addcmul,
    aten.mm.out: torch.mm,
    aten.bmm.out: torch.bmm,
    aten.addmm.out: torch.addmm,
    aten.baddbmm.out: torch.baddbmm,
    aten.index_select.out: torch.index_select,
    aten.cat.out: torch.cat,
    aten.stack.out: torch.stack,
    aten.bitwise_not.out: torch.bitwise_not,
    aten.lt.Tensor_out: torch.lt,
    aten.lt.Scalar_out: torch.lt,
    aten.le.Tensor_out: torch.le,
    aten.le.Scalar_out: torch.le,
    aten.gt.Tensor_out: torch.gt,
    aten.gt.Scalar_out: torch.gt,
    aten.ge.Tensor_out: torch.ge,
    aten.ge.Scalar_out: torch.ge,
    aten.where.self_out: torch.where,
    aten.eq.Tensor_out: torch.eq,
    aten.eq.Scalar_out: torch.eq,
    aten.ne.Tensor_out: torch.ne,
    aten.ne.Scalar_out: torch.ne,
    aten.exp.out: torch.exp,
    aten.sigmoid.out: torch.sigmoid,
    aten.sum.IntList_out: torch.sum,
    aten.amax.out: torch.amax,
    aten.argmax.out: torch.argmax,
    aten.gather.out: torch.gather,
    aten.clamp.out: torch.clamp,
    aten._softmax.out: torch._softmax,
    aten.gelu.out: torch._C._nn.gelu,
    aten.silu.out: torch._C._nn.silu,
}
_MUTATING_BINDINGS: dict[torch._ops.OpOverload, Callable[..., Any]] = {
    aten.copy_.default: torch.Tensor.copy_,
    aten.index_put_.default: torch.Tensor.index_put_,
}
_PROBED: dict[tuple, bool] = {}


class _Probe(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch._ops.OpOverload] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


def _kinds(obj: Any) -> Any:
    """What a binding's argument parser looks at: Tensor or not, and the Python type of the rest."""
    if isinstance(obj, torch.Tensor):
        return "Tensor"
    if isinstance(obj, (list, tuple)):
        return tuple(_kinds(o) for o in obj)
    if isinstance(obj, dict):
        return tuple((k, _kinds(v)) for k, v in obj.items())
    return type(obj).__name__


def _binding_for(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Callable[..., Any] | None:
    """The Python binding that dispatches exactly ``func`` for these arguments, or None.

    Called at capture right after ``func``'s functional twin produced the ``out=`` tensors in
    ``kwargs``, so running the binding once more (under a probe) rewrites the same values there.
    """
    binding = _BINDINGS.get(func)
    if binding is None:
        return None
    key = (func, _kinds(args), _kinds(kwargs))
    if key not in _PROBED:
        probe = _Probe()
        try:
            with probe:
                binding(*args, **kwargs)
            _PROBED[key] = probe.seen == [func]
        except (TypeError, RuntimeError):
            _PROBED[key] = False
    return binding if _PROBED[key] else None


@dataclass
class _Step:
    """One recorded op, bound to the tensors it must read and write at replay.

    ``call`` is the same op bound once to its arguments (a faster binding where one applies);
    ``writes`` are the tensors it writes; ``constant``: it reads no tensor and is not random, so
    rerunning it recomputes the value it already left in its output.
    """

    func: Callable[..., Any]
    args: tuple
    kwargs: dict
    writes: tuple = ()
    constant: bool = False
    call: Callable[[], Any] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.bind(self.func)

    def bind(self, fast: Callable[..., Any]) -> None:
        if isinstance(fast, torch._ops.OpOverload):
            fast = fast._op  # the C++ entry point: skips OpOverload.__call__'s Python frame
        self.call = partial(fast, *self.args, **self.kwargs)


def _written_args(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple:
    """The tensors a mutating op writes (schema arguments marked ``(a!)``)."""
    written = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
            written += list(iter_tensors(value))
    return tuple(written)


def _drop_constants(steps: list[_Step], keep: Any) -> list[_Step]:
    """Steps minus the constant ones whose outputs no step (and not the caller, via ``keep``) writes again."""
    written: dict[int, int] = {}
    for step in steps:
        for storage in _storages(step.writes):
            written[storage] = written.get(storage, 0) + 1
    kept = _storages(keep)
    return [step for step in steps
            if not (step.constant and all(written[s] == 1 and s not in kept for s in _storages(step.writes)))]


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
            step = _Step(func, args, kwargs, writes=_written_args(func, args, kwargs))
            if func in _MUTATING_BINDINGS:
                step.bind(_MUTATING_BINDINGS[func])
            self.steps.append(step)
            return
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if not all(isinstance(o, torch.Tensor) for o in outs):
            raise GraphCaptureError(f"{func} returned a non-tensor value, which a graph cannot replay")
        inputs = _storages((args, kwargs))
        if _storages(outs) & inputs:  # aliases an input: nothing to recompute
            return
        constant = not inputs and torch.Tag.nondeterministic_seeded not in func.tags
        variant = _out_variant(func)
        if variant is not None:
            out_func, out_names = variant
            # out= gets an alias frozen at the shape the op produced: an in-place metadata op recorded
            # later (``squeeze_``) changes the original tensor object, not what this step writes.
            frozen = (o.as_strided(o.shape, o.stride(), o.storage_offset()) for o in outs)
            out_kwargs = {**kwargs, **dict(zip(out_names, frozen))}
            step = _Step(out_func, args, out_kwargs, writes=tuple(outs), constant=constant)
            binding = _binding_for(out_func, args, out_kwargs)
            if binding is not None:
                step.bind(binding)
            self.steps.append(step)
        else:
            multi = isinstance(out, (tuple, list))
            self.steps.append(_Step(_compute_and_copy(func, multi), (outs, args), kwargs, writes=tuple(outs),
                                    constant=constant))


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
        self._calls = tuple(step.call for step in steps)
        self.output = output
        self._input_ptrs = input_addresses(static_inputs)
        self.ops_seen = ops_seen

    @property
    def num_steps(self) -> int:
        return len(self._steps)

    def replay(self, current_inputs: Mapping[str, torch.Tensor] | None = None) -> Any:
        if current_inputs is not None:
            check_static_inputs(self._input_ptrs, current_inputs)
        # Inference mode: the replayed ops skip autograd's dispatch layers (no_grad still enters them);
        # the C++ guard directly, without torch.inference_mode's Python wrapper.
        with torch._C._InferenceMode(True):
            for call in self._calls:
                call()
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
        # Only a whole graph knows every writer of a constant's output (a piece of a piecewise graph
        # does not: a later piece or a break may write it), so only here are constants dropped.
        steps = _drop_constants(piece._steps, keep=(output, dict(static_inputs)))
        return TapeGraph(steps, output, static_inputs, piece.ops_seen)

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
