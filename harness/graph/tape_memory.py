"""Where a tape graph's own tensors live: one arena per backend, shared by its graphs, planned from lifetimes.

A CUDA graph keeps its intermediates in a memory pool that every graph of a runner shares (SGLang
captures the largest bucket first so the smaller ones reuse its memory), and inside one capture the
caching allocator hands a block Python freed to the next allocation. Replays run one at a time and
each writes an intermediate before reading it, so the sharing is invisible, except to code that
reads a graph's tensor from outside between replays. A tape that kept every intermediate it recorded
instead needed one private copy of the whole forward per graph (GiBs for a 270M model's 40 graphs).

The tape does what the CUDA allocator does, after the fact. During capture, ``OwnedStorages`` notes
each storage the capture allocated, the first and last step that touches it, and whether Python
still holds a tensor of it when capture ends. Then:

* a storage Python dropped during capture is *shared*: it gets an offset in the backend's arena,
  planned so no two storages whose step ranges overlap overlap in memory (within one graph), and
  every graph of the backend plans from offset 0 (across graphs);
* a storage Python still holds (a memo entry, an attribute set in the forward, the graph's output)
  stays *private* to its graph, where it is, as a CUDA block still referenced is never handed to
  another capture; so is a constant's output, computed once at bind time and never again.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from harness.op_args import map_leaves

ALIGN = 64  # bytes: every shared storage starts on a cache line (and on any dtype's element size)


@dataclass(frozen=True)
class TensorRef:
    """A tensor of a graph-owned storage, as one step saw it: rebuilt at bind time over the storage's
    final home, so the step reads and writes memory it does not hold on its own."""

    sid: int
    dtype: torch.dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int  # in elements of ``dtype``, from the start of the storage


def _ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class OwnedStorages:
    """The storages one capture allocated: their ids, sizes, step ranges, and who still holds them."""

    def __init__(self) -> None:
        self.step = 0  # the index the next recorded step will get
        self.nbytes: list[int] = []
        self.ptr: list[int] = []
        self.first: list[int] = []
        self.last: list[int] = []
        self.alive: list[int] = []  # tensors of the storage Python still holds
        self.sample: list[weakref.ref] = []  # one of them, to find the storage again at the end
        self._by_ptr: dict[int, int] = {}
        self._tracked: dict[int, weakref.ref] = {}

    def adopt(self, t: torch.Tensor) -> None:
        """``t`` was just allocated by an op of the capture: its storage is the graph's."""
        nbytes = t.untyped_storage().nbytes()
        if nbytes == 0:
            return
        sid = len(self.nbytes)
        self._by_ptr[_ptr(t)] = sid
        self.ptr.append(_ptr(t))
        self.nbytes.append(nbytes)
        self.first.append(self.step)
        self.last.append(self.step)
        self.alive.append(0)
        self.sample.append(weakref.ref(t))
        self.track(t)

    def track(self, t: torch.Tensor) -> None:
        """Count ``t`` (an op's output: fresh, a view, or ``self`` of an in-place op) among its storage's holders."""
        sid = self._by_ptr.get(_ptr(t))
        if sid is None or id(t) in self._tracked:
            return
        self.alive[sid] += 1
        key = id(t)
        self._tracked[key] = weakref.ref(t, lambda _, sid=sid, key=key: self._dropped(sid, key))

    def _dropped(self, sid: int, key: int) -> None:
        self._tracked.pop(key, None)
        self.alive[sid] -= 1
        if self.alive[sid] == 0 and self._by_ptr.get(self.ptr[sid]) == sid:
            # The memory goes back to the allocator now and may come back as another storage.
            del self._by_ptr[self.ptr[sid]]

    def ref(self, t: torch.Tensor) -> TensorRef | torch.Tensor:
        """What a step keeps of ``t``: a ``TensorRef`` for a graph-owned storage, else ``t`` itself."""
        sid = self._by_ptr.get(_ptr(t))
        if sid is None:
            return t
        self.last[sid] = max(self.last[sid], self.step)
        return TensorRef(sid, dtype=t.dtype, shape=tuple(t.shape), stride=tuple(t.stride()), offset=t.storage_offset())

    def key(self, t: torch.Tensor) -> Any:
        """A storage's identity for write tracking: its sid if the graph owns it, else its address."""
        sid = self._by_ptr.get(_ptr(t))
        return ("ext", _ptr(t)) if sid is None else sid

    def held_at_end(self) -> dict[int, torch.UntypedStorage]:
        """The storages Python still holds now that capture is over, each with its storage object."""
        held = {}
        for sid, n in enumerate(self.alive):
            t = self.sample[sid]() if n else None
            if n and t is None:  # the sample died but a view lives: any tracked tensor of the storage
                t = next(
                    (
                        o
                        for o in (r() for r in self._tracked.values())
                        if o is not None and self._by_ptr.get(_ptr(o)) == sid
                    ),
                    None,
                )
            if t is not None:
                held[sid] = t.untyped_storage()
        return held


def plan_offsets(ranges: dict[int, tuple[int, int, int]]) -> tuple[dict[int, int], int]:
    """Byte offsets for storages ``sid -> (first step, last step, nbytes)``: two whose step ranges overlap
    never overlap in memory. Largest first, each at the lowest offset that fits (a greedy best fit, as
    static memory planners do); returns the offsets and the arena size they need."""
    placed: list[tuple[int, int, int, int]] = []  # (offset, end, first, last)
    offsets: dict[int, int] = {}
    for sid, (first, last, nbytes) in sorted(ranges.items(), key=lambda kv: (-kv[1][2], kv[1][0], kv[0])):
        size = -(-nbytes // ALIGN) * ALIGN
        busy = sorted((o, e) for o, e, f, end in placed if f <= last and first <= end)
        offset = 0
        for o, e in busy:
            if offset + size <= o:
                break
            offset = max(offset, e)
        offsets[sid] = offset
        placed.append((offset, offset + size, first, last))
    return offsets, max((e for _, e, _, _ in placed), default=0)


class Arena:
    """The memory a backend's graphs share: as large as the largest plan, grown (and every graph rebound)
    when a later capture needs more."""

    def __init__(self) -> None:
        self.nbytes = 0
        self.storage: torch.UntypedStorage | None = None
        self._users: list[Callable[[], Any]] = []  # weak references to the graphs' rebind methods

    def reserve(self, nbytes: int, rebind: Callable[[], None]) -> None:
        self._users.append(weakref.WeakMethod(rebind))
        if nbytes > self.nbytes:
            self.nbytes = nbytes
            self.storage = torch.empty(nbytes, dtype=torch.uint8).untyped_storage()
            for user in self._users:
                method = user()
                if method is not None and method != rebind:
                    method()
        self._users = [u for u in self._users if u() is not None]


class GraphMemory:
    """One graph's storages: shared ones at their planned arena offsets, private ones where capture left them."""

    def __init__(self, owned: OwnedStorages, arena: Arena, *, private: set[int]) -> None:
        self.arena = arena
        held = owned.held_at_end()
        self.private: dict[int, torch.UntypedStorage] = {}
        for sid in private | set(held):
            self.private[sid] = held.get(sid) or torch.empty(owned.nbytes[sid], dtype=torch.uint8).untyped_storage()
        shared = {
            sid: (owned.first[sid], owned.last[sid], owned.nbytes[sid])
            for sid in range(len(owned.nbytes))
            if sid not in self.private
        }
        self.offsets, self.shared_nbytes = plan_offsets(shared)
        self.private_nbytes = sum(s.nbytes() for s in self.private.values())
        self.owned_nbytes = sum(owned.nbytes)  # what the graph would keep without planning

    def tensor(self, ref: TensorRef) -> torch.Tensor:
        if ref.sid in self.private:
            storage, base = self.private[ref.sid], 0
        else:
            storage, base = self.arena.storage, self.offsets[ref.sid]
        element = ref.dtype.itemsize
        return torch.empty(0, dtype=ref.dtype).set_(storage, base // element + ref.offset, ref.shape, ref.stride)

    def resolver(self) -> Callable[[Any], Any]:
        """Replaces every ``TensorRef`` in a step's arguments by its tensor (one object per ref)."""
        made: dict[TensorRef, torch.Tensor] = {}

        def leaf(obj: Any) -> Any:
            if not isinstance(obj, TensorRef):
                return obj
            if obj not in made:
                made[obj] = self.tensor(obj)
            return made[obj]

        return lambda tree: map_leaves(tree, leaf)
