"""Fast replay of a tape: an optimisation only, with the same semantics as the plain replay.

The plain replay (``harness.graph.tape``) is: for each recorded step, call its aten overload on its
tensors, ``func(*args, **kwargs)``. A decode step of a small model is hundreds of tiny ops, so the
fixed cost per call matters; this module cuts it without changing which overload runs or what it
writes:

* **bound calls** (``bound_call``): each step is bound once into a zero-argument callable (no
  argument unpacking or kwargs merging at replay), through the dispatcher's boxed call on the
  overload's handle, which is what ``OpOverload.__call__`` ends in;
* **Python bindings** (``binding_for``, ``mutating_binding``): where torch's generated Python binding
  of an op dispatches exactly the recorded overload, it is called instead (it parses its arguments
  far more cheaply than the boxed call's generic schema matching);
* **exact substitutes** (``exact_substitute``): a few calls are recorded as cheaper ones computing the
  same bits (a Python number operand as a 0-dim tensor made once, ``masked_fill`` as ``where``);
* **constants** (``split_constants``): a step that reads no tensor, is not random and whose output
  nothing writes again runs once when the graph is bound, not at every replay.

How the sameness is checked: a binding stands in for an overload only after a probe (a dispatch
mode) saw it dispatch exactly that overload for the same kinds of arguments, once per overload and
kinds, at capture; ``tests/test_tape_replay_cost.py`` counts the ops a replay dispatches against the
recorded ones and compares the values bit for bit with eager (substitutes included, with NaN,
infinities and signed zeros), and checks which constants are dropped; the differential suites
(``suites/differential/test_graph_vs_eager.py``) compare whole tape replays with eager runs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, TypeVar

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


# --- Bound calls -------------------------------------------------------------------------------------
def bound_call(func: Callable[..., Any], args: tuple, kwargs: dict) -> Callable[[], Any]:
    """``func`` bound to its resolved arguments: a call at replay costs no argument handling.

    For an ``OpOverload``, the dispatcher's boxed call on the operator's handle, a little cheaper than
    the jit entry point ``_op``; but only ``_op`` boxes a Python number passed as a Tensor.
    """
    if not isinstance(func, torch._ops.OpOverload):
        return partial(func, *args, **kwargs)
    if _numbers_as_tensors(func, args, kwargs):
        return partial(func._op, *args, **kwargs)
    return partial(torch._C._dispatch_call_boxed, func._handle, *args, **kwargs)


def _numbers_as_tensors(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    """Whether a Python number is passed where ``func``'s schema takes a Tensor."""
    for i, arg in enumerate(func._schema.arguments):
        value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
        if value is not None and not isinstance(value, torch.Tensor) and isinstance(arg.type, torch.TensorType):
            return True
    return False


# --- Python bindings -----------------------------------------------------------------------------------

# torch's generated Python bindings for the ops a model's step is made of. Each calls the aten overload
# through the dispatcher like ``OpOverload.__call__`` does, but parses its arguments far more cheaply.
# A binding stands in for a recorded overload only after a probe saw it dispatch exactly that overload
# for the same kinds of arguments (``binding_for``); mutating ops are not probed (running them twice is
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


def mutating_binding(func: torch._ops.OpOverload) -> Callable[..., Any] | None:
    """The Python binding of an in-place op whose binding has ``func`` as its only overload, or None."""
    return _MUTATING_BINDINGS.get(func)


def binding_for(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Callable[..., Any] | None:
    """The Python binding that dispatches exactly ``func`` for these arguments, or None.

    Called at capture right after ``func``'s functional twin produced the ``out=`` tensors in
    ``kwargs``, so running the binding once more (under a probe) rewrites the same values there.
    """
    binding = _BINDINGS.get(func)
    if binding is None:
        return None
    key = (func, _kinds(args), _kinds(kwargs))
    if key not in _PROBED:
        _PROBED[key] = _dispatches_only(binding, func, args, kwargs)
    return binding if _PROBED[key] else None


def _dispatches_only(binding: Callable[..., Any], func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> bool:
    """Whether calling ``binding`` on these arguments dispatches ``func`` and nothing else."""
    probe = _Probe()
    try:
        with probe:
            binding(*args, **kwargs)
    except (TypeError, RuntimeError):
        return False
    return probe.seen == [func]


class _Probe(TorchDispatchMode):
    """Notes the overloads a call dispatches, and runs them."""

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


# --- Exact substitutes ---------------------------------------------------------------------------------

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
    aten.add.out: aten.add.out,
    aten.sub.out: aten.sub.out,
    aten.mul.out: aten.mul.out,
    aten.div.out: aten.div.out,
    **{getattr(aten, op).Scalar_out: getattr(aten, op).Tensor_out for op in ("lt", "le", "gt", "ge", "eq", "ne")},
}
_SCALAR_TENSORS: dict[tuple, torch.Tensor] = {}


def exact_substitute(
    func: torch._ops.OpOverload, args: tuple, kwargs: dict
) -> tuple[torch._ops.OpOverload, tuple, dict]:
    """``(func, args, kwargs)`` of a cheaper call computing exactly what ``func(*args, **kwargs)`` does
    (see above), or the call unchanged. ``kwargs`` holds the ``out=`` tensor."""
    if func in _NUMBER_OPERAND_OPS and len(args) == 2:
        operand = _exact_operand(args[0], args[1])
        if operand is not None:
            return _NUMBER_OPERAND_OPS[func], (args[0], operand), kwargs
    if func is aten.masked_fill.Scalar_out and len(args) == 3 and _is_number(args[2]) and kwargs.keys() == {"out"}:
        x, mask, value = args
        if (
            x.is_floating_point()
            and mask.dtype == torch.bool
            and kwargs["out"].dtype == x.dtype
            and torch.broadcast_shapes(mask.shape, x.shape) == x.shape
        ):
            return aten.where.self_out, (mask, _scalar_tensor(value, x.dtype, x.device), x), kwargs
    return func, args, kwargs


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


def _scalar_tensor(value: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """One shared 0-dim tensor per number, dtype and device: made once, never written."""
    key = (type(value), value, dtype, device)
    if key not in _SCALAR_TENSORS:
        _SCALAR_TENSORS[key] = torch.tensor(value, dtype=dtype, device=device)
    return _SCALAR_TENSORS[key]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# --- Constants ------------------------------------------------------------------------------------------
class _Recorded(Protocol):
    writes: tuple
    constant: bool


_StepT = TypeVar("_StepT", bound=_Recorded)


def split_constants(steps: list[_StepT], keep: set) -> tuple[list[_StepT], list[_StepT]]:
    """(steps to replay, constant steps to run once at bind): a constant is run once when no other step
    (and not the caller, via the storage keys in ``keep``) writes its output again."""
    written: dict[Any, int] = {}
    for step in steps:
        for key in step.writes:
            written[key] = written.get(key, 0) + 1
    once = [step for step in steps if step.constant and all(written[k] == 1 and k not in keep for k in step.writes)]
    ids = {id(step) for step in once}
    return [step for step in steps if id(step) not in ids], once
