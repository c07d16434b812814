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
output when aten has one, else computed and copied in. A piecewise capture (``capture_piecewise``)
records each ``graph_break`` as one more step, which runs its Python again at replay.

The tensors a capture allocates belong to the graph, and like a CUDA graph's they do not each keep
their own memory: after capture they are planned into an arena every graph of the backend shares, by
the step ranges over which they are used (``harness.graph.tape_memory``).

Replay cost per op is kept low, since a decode step of a small model is hundreds of tiny ops: each
step is bound once into a zero-argument callable (no argument unpacking or kwargs merging at replay),
through torch's generated Python binding of the op where one calls exactly the recorded overload
(checked once per overload and argument kinds, else the dispatcher's boxed call on the overload's
handle, whose generic schema matching costs more); and the steps that are constants (an op with no
tensor inputs, such as ``arange``, whose output nothing in the graph writes again) run once when the
graph is bound, not at every replay. A few calls are recorded as cheaper ones that compute the same
bits (``_exact_substitute``: a Python number operand as a 0-dim tensor made once, ``masked_fill`` as
``where``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.op_args import iter_tensors, map_leaves
from harness.graph.errors import GraphCaptureError, check_static_inputs, input_addresses
from harness.graph.piecewise import splitting
from harness.graph.tape_memory import Arena, GraphMemory, OwnedStorages

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

# Exact substitutions, made when a step is recorded, for calls whose every replay would otherwise pay a
# fixed cost unrelated to the math: a Python number operand is boxed into a new tensor or Scalar on every
# call, and ``masked_fill.Scalar_out`` has no Python binding. Each substitute computes the same bits:
# * a Python number operand of an arithmetic or comparison op becomes a 0-dim tensor made once, of the
#   other operand's dtype, when that is fp32 (any number) or int32/int64 (an int it holds). The kernel
#   reads the boxed number cast to that dtype, which is the tensor's value, and a 0-dim operand of the
#   same dtype changes no result dtype. Not for reduced-precision floats: there the boxed number stays in fp32
#   while a 0-dim tensor of that dtype would round it.
# * ``masked_fill(x, mask, v)`` on a floating ``x`` is ``where(mask, v, x)`` with ``v`` a 0-dim tensor of
#   ``x``'s dtype (masked_fill casts ``v`` to that dtype too), when ``mask`` broadcasts to ``x``'s shape.
_NUMBER_OPERAND_OPS: dict[torch._ops.OpOverload, torch._ops.OpOverload] = {
    aten.add.out: aten.add.out, aten.sub.out: aten.sub.out, aten.mul.out: aten.mul.out, aten.div.out: aten.div.out,
    **{getattr(aten, op).Scalar_out: getattr(aten, op).Tensor_out for op in ("lt", "le", "gt", "ge", "eq", "ne")},
}
_SCALAR_TENSORS: dict[tuple, torch.Tensor] = {}


def _scalar_tensor(value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    key = (type(value), value, dtype, device)
    if key not in _SCALAR_TENSORS:
        _SCALAR_TENSORS[key] = torch.tensor(value, dtype=dtype, device=device)
    return _SCALAR_TENSORS[key]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _exact_operand(tensor: Any, value: Any) -> torch.Tensor | None:
    """A 0-dim tensor standing exactly for the Python number ``value`` beside ``tensor``, or None."""
    if not isinstance(tensor, torch.Tensor) or not _is_number(value):
        return None
    if tensor.dtype == torch.float32:
        return _scalar_tensor(value, tensor.dtype, tensor.device)
    if tensor.dtype in (torch.int32, torch.int64) and isinstance(value, int):
        info = torch.iinfo(tensor.dtype)
        if info.min <= value <= info.max:  # else the boxed number's cast wraps, a tensor's would refuse
            return _scalar_tensor(value, tensor.dtype, tensor.device)
    return None


def _exact_substitute(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[torch._ops.OpOverload, tuple, dict]:
    """``(func, args, kwargs)`` of a cheaper call computing exactly what ``func(*args, **kwargs)`` does
    (see above), or the call unchanged. ``kwargs`` holds the ``out=`` tensor."""
    if func in _NUMBER_OPERAND_OPS and len(args) == 2:
        operand = _exact_operand(args[0], args[1])
        if operand is not None:
            return _NUMBER_OPERAND_OPS[func], (args[0], operand), kwargs
    if func is aten.masked_fill.Scalar_out and len(args) == 3 and _is_number(args[2]) and kwargs.keys() == {"out"}:
        x, mask, value = args
        if (x.is_floating_point() and mask.dtype == torch.bool and kwargs["out"].dtype == x.dtype
                and torch.broadcast_shapes(mask.shape, x.shape) == x.shape):
            return aten.where.self_out, (mask, _scalar_tensor(value, x.dtype, x.device), x), kwargs
    return func, args, kwargs


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
    """One recorded op, bound at bind time to the tensors it must read and write at replay.

    ``args``/``kwargs`` hold the graph's own tensors as ``TensorRef``s (their memory is planned after
    capture, ``harness.graph.tape_memory``) and outside tensors as themselves; ``writes`` are the keys
    of the storages it writes; ``constant``: it reads no tensor and is not random, so rerunning it
    recomputes the value it already left in its output; ``fast``: a cheaper callable that dispatches
    exactly ``func`` for these arguments; ``call`` is the op bound to its tensors.
    """

    func: Callable[..., Any]
    args: tuple
    kwargs: dict
    writes: tuple = ()
    constant: bool = False
    fast: Callable[..., Any] | None = None
    call: Callable[[], Any] = field(init=False, repr=False)

    def bind(self, resolve: Callable[[Any], Any]) -> None:
        fast = self.fast or self.func
        args, kwargs = resolve(self.args), resolve(self.kwargs)
        if isinstance(fast, torch._ops.OpOverload):
            # The dispatcher's boxed call on the operator's handle is what OpOverload.__call__ ends in, a little
            # cheaper than the jit entry point ``_op``; but only ``_op`` boxes a Python number passed as a Tensor.
            if _numbers_as_tensors(fast, args, kwargs):
                self.call = partial(fast._op, *args, **kwargs)
            else:
                self.call = partial(torch._C._dispatch_call_boxed, fast._handle, *args, **kwargs)
        else:
            self.call = partial(fast, *args, **kwargs)


def _numbers_as_tensors(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    """Whether a Python number is passed where ``func``'s schema takes a Tensor."""
    for i, arg in enumerate(func._schema.arguments):
        value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
        if value is not None and not isinstance(value, torch.Tensor) and isinstance(arg.type, torch.TensorType):
            return True
    return False


def _written_args(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple:
    """The tensors a mutating op writes (schema arguments marked ``(a!)``)."""
    written = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
            written += list(iter_tensors(value))
    return tuple(written)


def _split_constants(steps: list[_Step], keep: set) -> tuple[list[_Step], list[_Step]]:
    """(steps to replay, constant steps to run once at bind): a constant is run once when no other step
    (and not the caller, via the storage keys in ``keep``) writes its output again."""
    written: dict[Any, int] = {}
    for step in steps:
        for key in step.writes:
            written[key] = written.get(key, 0) + 1
    once = [step for step in steps
            if step.constant and all(written[k] == 1 and k not in keep for k in step.writes)]
    ids = {id(step) for step in once}
    return [step for step in steps if id(step) not in ids], once


def _run_break(run: Callable[..., torch.Tensor]) -> Callable[..., None]:
    def call(out: torch.Tensor, inputs: tuple) -> None:
        # Eager Python between the pieces, as at capture: outside inference mode (it may keep tensors).
        with torch._C._InferenceMode(False), torch.no_grad():
            out.copy_(run(*inputs))

    return call


class _Recorder(TorchDispatchMode):
    """Records the ops of one capture into steps; ``split`` records a piecewise graph's eager break."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[_Step] = []
        self.owned = OwnedStorages()
        self.ops_seen = 0
        self.paused = False
        self._grad = torch.no_grad()
        self._saved: tuple | None = None

    def start(self) -> None:
        self._forbid_host_reads()
        self._grad.__enter__()
        self.__enter__()

    def stop(self) -> None:
        self.__exit__(None, None, None)
        self._grad.__exit__(None, None, None)
        self._allow_host_reads()

    def _forbid_host_reads(self) -> None:
        self._saved = torch.Tensor.tolist, torch.Tensor.numpy
        torch.Tensor.tolist, torch.Tensor.numpy = _forbid("tolist"), _forbid("numpy")

    def _allow_host_reads(self) -> None:
        if self._saved is not None:
            torch.Tensor.tolist, torch.Tensor.numpy = self._saved
            self._saved = None

    @contextmanager
    def _paused(self) -> Iterator[None]:
        """Eager Python inside a capture (a break): nothing recorded, host reads allowed."""
        self.paused = True
        self._allow_host_reads()
        try:
            yield
        finally:
            self.paused = False
            self._forbid_host_reads()

    def split(self, run: Callable[..., torch.Tensor], inputs: tuple) -> torch.Tensor:
        """A ``graph_break``: run eagerly now and, as one step, at every replay, writing the tensor returned here."""
        with self._paused():
            result = run(*inputs)
        out = torch.empty_like(result)  # recorded: a storage of the graph's, planned like any other
        with self._paused():
            out.copy_(result)
        owned = self.owned
        writes = tuple(owned.key(t) for t in (out, *iter_tensors(inputs)))  # the break may write its inputs
        self._append(_Step(_run_break(run), (owned.ref(out), tuple(self._refs(inputs))), {}, writes=writes))
        return out

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        reason = _host_sync_reason(func, args, kwargs)
        if reason is not None:
            raise GraphCaptureError(f"{func} cannot be captured into a graph: {reason} needs a host sync")
        out = func(*args, **kwargs)
        self.ops_seen += 1
        self._record(func, args, kwargs, out)
        return out

    def _refs(self, tree: Any) -> Any:
        ref = self.owned.ref
        return map_leaves(tree, lambda x: ref(x) if isinstance(x, torch.Tensor) else x)

    def _append(self, step: _Step) -> None:
        self.steps.append(step)
        self.owned.step = len(self.steps)

    def _record(self, func, args: tuple, kwargs: dict, out: Any) -> None:
        owned = self.owned
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if func.is_view:  # not replayed: a captured view still aliases its base
            for o in iter_tensors(outs):
                owned.track(o)
            return
        if func in _SKIP_AT_REPLAY:
            for o in outs:
                owned.adopt(o)
            return
        if func._schema.is_mutable:  # in-place or out=: replaying writes into the same tensors
            writes = tuple(owned.key(t) for t in _written_args(func, args, kwargs))
            self._append(_Step(func, self._refs(args), self._refs(kwargs), writes=writes,
                               fast=_MUTATING_BINDINGS.get(func)))
            for o in iter_tensors(outs):
                owned.track(o)
            return
        if not all(isinstance(o, torch.Tensor) for o in outs):
            raise GraphCaptureError(f"{func} returned a non-tensor value, which a graph cannot replay")
        inputs = _storages((args, kwargs))
        if _storages(outs) & inputs:  # aliases an input: nothing to recompute
            for o in outs:
                owned.track(o)
            return
        for o in outs:
            owned.adopt(o)
        constant = not inputs and torch.Tag.nondeterministic_seeded not in func.tags
        writes = tuple(owned.key(o) for o in outs)
        variant = _out_variant(func)
        if variant is not None:
            out_func, out_names = variant
            # The refs freeze each output's shape as the op produced it: an in-place metadata op recorded
            # later (``squeeze_``) changes the tensor object, not what this step writes.
            out_kwargs = {**kwargs, **dict(zip(out_names, outs))}
            out_func, args, out_kwargs = _exact_substitute(out_func, args, out_kwargs)
            self._append(_Step(out_func, self._refs(args), self._refs(out_kwargs), writes=writes, constant=constant,
                               fast=_binding_for(out_func, args, out_kwargs)))
        else:
            multi = isinstance(out, (tuple, list))
            self._append(_Step(_compute_and_copy(func, multi), (self._refs(tuple(outs)), self._refs(args)),
                               self._refs(kwargs), writes=writes, constant=constant))


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
    """A captured tape: ``replay()`` re-runs the recorded ops; ``output`` is what capture returned.

    Its own tensors live where ``memory`` put them (``harness.graph.tape_memory``); the steps are bound
    to them here, and again whenever the shared arena grows.
    """

    def __init__(self, steps: list[_Step], constants: list[_Step], output: Any,
                 static_inputs: Mapping[str, torch.Tensor], ops_seen: int, memory: GraphMemory):
        self._steps = steps
        self._constants = constants
        self.output = output
        self.memory = memory
        self._input_ptrs = input_addresses(static_inputs)
        self.ops_seen = ops_seen
        self._calls: tuple[Callable[[], Any], ...] = ()
        memory.arena.reserve(memory.shared_nbytes, self._bind)
        self._bind()

    def _bind(self) -> None:
        resolve = self.memory.resolver()
        for step in self._constants:
            step.bind(resolve)
            step.call()  # once: nothing in the graph writes a constant's output again
        for step in self._steps:
            step.bind(resolve)
        self._calls = tuple(step.call for step in self._steps)

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
    """Graphs on, CPU: record once, replay the ops without Python. Every graph of one backend shares its
    ``arena`` for the tensors Python dropped during capture, as CUDA graphs share a memory pool."""

    name = "tape"

    def __init__(self) -> None:
        self.arena = Arena()

    def capture(self, fn: Callable[[], Any], *, static_inputs: Mapping[str, torch.Tensor]) -> TapeGraph:
        return self._capture(fn, static_inputs, piecewise=False)

    def capture_piecewise(self, fn: Callable[[], Any], *, static_inputs: Mapping[str, torch.Tensor]) -> TapeGraph:
        """One tape for the whole callable; each ``graph_break`` in it is a step that runs its Python again."""
        return self._capture(fn, static_inputs, piecewise=True)

    def _capture(self, fn: Callable[[], Any], static_inputs: Mapping[str, torch.Tensor], *, piecewise: bool) -> TapeGraph:
        recorder = _Recorder()
        recorder.start()
        try:
            with splitting(recorder) if piecewise else nullcontext():
                output = fn()
        finally:
            recorder.stop()
        owned = recorder.owned
        keep = {owned.key(t) for t in iter_tensors((output, dict(static_inputs)))}
        steps, constants = _split_constants(recorder.steps, keep)
        once = {k for step in constants for k in step.writes if isinstance(k, int)}
        memory = GraphMemory(owned, self.arena, private=once)
        return TapeGraph(steps, constants, output, static_inputs, recorder.ops_seen, memory)
