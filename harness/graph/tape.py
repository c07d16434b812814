"""The CPU "tape" graph backend: CUDA-graph semantics without a GPU.

**Capture.** ``TapeBackend.capture(fn)`` runs ``fn`` once under a ``TorchDispatchMode`` (``_Recorder``)
that records every aten op with the very tensors it read and wrote, as a CUDA stream capture records
kernels with their device pointers. Replay re-runs exactly those ops on the same tensors, writing each
result into the tensor captured for it; Python does not run again. So, as with a CUDA graph:

* a decision taken in Python during capture (a memo hit, a branch, a shape) is frozen into the tape;
* inputs must be refilled in place (``copy_``) — a newly bound tensor is never seen;
* a host sync, anything that has the host look at tensor data (``.item()``, ``nonzero``, boolean-mask
  indexing, data-dependent output shapes, ``tolist()``), cannot be captured and raises
  ``GraphCaptureError`` (the host-sync table below says which ops and methods, and why).

View ops are not replayed (a captured view still aliases its base); in-place and ``out=`` ops are
replayed as recorded; functional ops are replayed through their ``out=`` overload into the captured
output when aten has one, else computed and copied in. A piecewise capture (``capture_piecewise``)
records each ``graph_break`` as one more step, which runs its Python again at replay.

The tensors a capture allocates belong to the graph, and like a CUDA graph's they do not each keep
their own memory: after capture they are planned into an arena every graph of the backend shares, by
the step ranges over which they are used (``harness.graph.tape_memory``). Replay is made cheap per op
(bound calls, Python bindings, exact substitutes, constants run once) by ``harness.graph.tape_replay``,
an optimisation with the same semantics as calling each recorded op.

**The process-wide patch.** Most host syncs are aten ops, which the recorder's dispatch mode sees.
``Tensor.tolist`` and ``Tensor.numpy`` are not: they read the tensor's memory in C++ without
dispatching any op, so the only place to refuse them is the method itself. For the duration of a
capture the recorder replaces two attributes of the class ``torch.Tensor`` with functions that raise
``GraphCaptureError``:

* ``torch.Tensor.tolist``
* ``torch.Tensor.numpy``

They are installed when the capture starts (``_Recorder.start``, before ``fn`` runs) and removed when
it stops (in a ``finally``, so also when the capture raises) by assigning back what was there before;
since the originals are inherited from ``torch._C.TensorBase``, after the first capture ``torch.Tensor``
keeps attributes of its own equal to them. They are also removed while the eager Python of a
``graph_break`` runs, and installed again after it.

The patch is process-wide because a class attribute is: Python has no per-thread method lookup. The
dispatch mode and the ``no_grad`` of a capture are thread-local, and so is the refusal: the guards raise
only on a thread that is capturing (``_CAPTURING``) and call the original method on any other. A CUDA
capture refuses the capturing stream's syncs, not another thread's reads of host memory; a server that
captures lazily (``--capture lazy``) captures on its engine thread while its HTTP threads read finished
requests' logprobs with ``.tolist()``, and those must not fail (they did, with HTTP 500, before the flag).
Another thread's ops are neither recorded nor refused, and its grad mode is its own. Two captures at
once on two threads are not supported: each restores what it saw at its start, so unless they end in the
reverse order of their start, the guards stay installed after both (harmless to other threads).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.op_args import iter_tensors, map_leaves
from harness.graph.errors import GraphCaptureError, check_static_inputs, input_addresses
from harness.graph.piecewise import splitting
from harness.graph.tape_memory import Arena, GraphMemory, OwnedStorages
from harness.graph.tape_replay import binding_for, bound_call, exact_substitute, mutating_binding, split_constants

aten = torch.ops.aten


# --- Host syncs: what a capture refuses ----------------------------------------------------------------
#
# A CUDA graph is recorded from a stream without waiting for anything, and replayed without the host,
# so nothing in it can hand the host a value the host must wait for. Reading a tensor's data
# (``.item()``, ``bool()``, ``torch.equal``) needs a device-to-host copy and a stream sync, which CUDA
# refuses during capture ("operation not permitted when stream is capturing"); an op whose output shape
# depends on the data must sync to learn the size to allocate, and a replay could not change the size
# anyway. The tape refuses the same, so a forward that captures here does not fail on a GPU for a host sync.

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

# Tensor methods that read data on the host without dispatching an aten op, so the dispatch mode never
# sees them: refused by the process-wide patch of ``torch.Tensor`` (module docstring).
_HOST_READ_METHODS = ("tolist", "numpy")


def _host_sync_reason(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> str | None:
    """Why ``func`` on these arguments is a host sync, or None when it is not."""
    if func in _HOST_SYNC_OPS:
        return _HOST_SYNC_OPS[func]
    if func is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
        return "repeat_interleave without output_size (data-dependent shape)"
    if func in (aten.index.Tensor, aten.index_put_.default, aten.index_put.default):
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices):
            return "boolean-mask indexing (data-dependent shape)"
    return None


_CAPTURING = threading.local()  # ``active``: this thread is inside a capture (not paused at a break)


class _HostReadPatch:
    """The process-wide patch of ``_HOST_READ_METHODS`` on ``torch.Tensor``, refusing on the capturing thread only
    (module docstring)."""

    def __init__(self) -> None:
        self._saved: dict[str, Any] | None = None

    def install(self) -> None:
        self._saved = {name: getattr(torch.Tensor, name) for name in _HOST_READ_METHODS}
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, _forbid(name, original))
        _CAPTURING.active = True

    def remove(self) -> None:
        """Put back what ``install`` replaced; nothing when it is not installed."""
        if self._saved is not None:
            _CAPTURING.active = False
            for name, method in self._saved.items():
                setattr(torch.Tensor, name, method)
            self._saved = None


def _forbid(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def guard(self, *args, **kwargs):
        if getattr(_CAPTURING, "active", False):
            raise GraphCaptureError(
                f"Tensor.{name}() cannot be captured into a graph: it reads tensor data on the host"
            )
        return original(self, *args, **kwargs)

    return guard


# --- The recorder: capture -----------------------------------------------------------------------------
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
        """Bind ``call`` to the tensors ``resolve`` finds for the refs (again whenever they move)."""
        self.call = bound_call(self.fast or self.func, resolve(self.args), resolve(self.kwargs))


# Allocations: their tensors are the graph's (planned after capture); replay has nothing to redo.
_SKIP_AT_REPLAY = {aten.empty.memory_format, aten.empty_strided.default, aten.empty_like.default}


class _Recorder(TorchDispatchMode):
    """Records the ops of one capture into steps; ``split`` records a piecewise graph's eager break.

    ``start`` enters the dispatch mode and ``no_grad`` (both thread-local) and installs the
    process-wide host-read patch; ``stop`` undoes all three.
    """

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[_Step] = []
        self.owned = OwnedStorages()
        self.ops_seen = 0
        self.paused = False
        self._grad = torch.no_grad()
        self._host_reads = _HostReadPatch()

    def start(self) -> None:
        self._host_reads.install()
        self._grad.__enter__()
        self.__enter__()

    def stop(self) -> None:
        self.__exit__(None, None, None)
        self._grad.__exit__(None, None, None)
        self._host_reads.remove()

    @contextmanager
    def _paused(self) -> Iterator[None]:
        """Eager Python inside a capture (a break): nothing recorded, host reads allowed."""
        self.paused = True
        self._host_reads.remove()
        try:
            yield
        finally:
            self.paused = False
            self._host_reads.install()

    def split(self, run: Callable[..., torch.Tensor], inputs: tuple) -> torch.Tensor:
        """A ``graph_break``: run eagerly now and, as one step, at every replay, writing the tensor returned here."""
        with self._paused():
            result = run(*inputs)
        out = torch.empty_like(result)  # recorded: a storage of the graph's, planned like any other
        with self._paused():
            out.copy_(result)
        owned = self.owned
        writes = tuple(owned.key(t) for t in (out, *iter_tensors(inputs)))  # the break may write its inputs
        self._append(
            _Step(func=_run_break(run), args=(owned.ref(out), tuple(self._refs(inputs))), kwargs={}, writes=writes)
        )
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
            self._append(
                _Step(
                    func=func,
                    args=self._refs(args),
                    kwargs=self._refs(kwargs),
                    writes=writes,
                    fast=mutating_binding(func),
                )
            )
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
            out_func, args, out_kwargs = exact_substitute(out_func, args, out_kwargs)
            self._append(
                _Step(
                    func=out_func,
                    args=self._refs(args),
                    kwargs=self._refs(out_kwargs),
                    writes=writes,
                    constant=constant,
                    fast=binding_for(out_func, args, out_kwargs),
                )
            )
        else:
            multi = isinstance(out, (tuple, list))
            self._append(
                _Step(
                    func=_compute_and_copy(func, multi),
                    args=(self._refs(tuple(outs)), self._refs(args)),
                    kwargs=self._refs(kwargs),
                    writes=writes,
                    constant=constant,
                )
            )


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


def _written_args(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple:
    """The tensors a mutating op writes (schema arguments marked ``(a!)``)."""
    written = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
            written += list(iter_tensors(value))
    return tuple(written)


def _storages(tree: Any) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in iter_tensors(tree)}


def _compute_and_copy(func, multi: bool) -> Callable[..., None]:
    """The step of a functional op without an ``out=`` overload: compute, then copy into the captured outputs."""

    def run(outs, args, **kwargs):
        result = func(*args, **kwargs)
        for dst, src in zip(outs, result if multi else (result,)):
            dst.copy_(src)

    return run


def _run_break(run: Callable[..., torch.Tensor]) -> Callable[..., None]:
    """The step of a ``graph_break``: its Python again, writing into the tensor capture returned."""

    def call(out: torch.Tensor, inputs: tuple) -> None:
        # Eager Python between the pieces, as at capture: outside inference mode (it may keep tensors).
        with torch._C._InferenceMode(False), torch.no_grad():
            out.copy_(run(*inputs))

    return call


# --- The graph: replay ---------------------------------------------------------------------------------
class TapeGraph:
    """A captured tape: ``replay()`` re-runs the recorded ops; ``output`` is what capture returned.

    Its own tensors live where ``memory`` put them (``harness.graph.tape_memory``); the steps are bound
    to them here, and again whenever the shared arena grows. ``constants`` run once per binding, not
    at every replay (``harness.graph.tape_replay.split_constants``).
    """

    def __init__(
        self,
        steps: list[_Step],
        constants: list[_Step],
        output: Any,
        static_inputs: Mapping[str, torch.Tensor],
        ops_seen: int,
        memory: GraphMemory,
    ):
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


# --- The backend ---------------------------------------------------------------------------------------
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

    def _capture(
        self, fn: Callable[[], Any], static_inputs: Mapping[str, torch.Tensor], *, piecewise: bool
    ) -> TapeGraph:
        recorder = _Recorder()
        recorder.start()
        try:
            with splitting(recorder) if piecewise else nullcontext():
                output = fn()
        finally:
            recorder.stop()
        owned = recorder.owned
        keep = {owned.key(t) for t in iter_tensors((output, dict(static_inputs)))}
        steps, constants = split_constants(recorder.steps, keep)
        once = {k for step in constants for k in step.writes if isinstance(k, int)}
        memory = GraphMemory(owned, self.arena, private=once)
        return TapeGraph(
            steps,
            constants=constants,
            output=output,
            static_inputs=static_inputs,
            ops_seen=recorder.ops_seen,
            memory=memory,
        )
