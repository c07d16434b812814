"""Prefix cache of a hybrid SWA pool: a radix tree over token ids whose nodes hold full KV and SWA KV apart.

SGLang keeps one for every hybrid model (``UnifiedRadixCache``, FULL and SWA components); this is the
harness's own, with SGLang's concepts and names. The rules, and the fixes they come from:

1. **Values.** A node holds the full slots of its tokens (whole pages). Its SWA KV is either live (every
   slot's mapping is non-zero) or a *tombstone* (every mapping reads 0: the SWA slots went back when the
   tokens left the window, the full KV stays). Never mixed: inserts split at the request's
   ``swa_evicted`` and SWA evictions take whole nodes (#17220). A node's slots are never two nodes'.
2. **Matches.** The next query after position ``m`` attends over ``[m - W + 1, m)``, so a match may end
   at ``m`` only where those tokens hold live SWA KV; it backs off to the deepest node end where they do
   (#17061: a tombstone resets the live run).
3. **Locks.** Locking node ``n`` pins the full KV of the path root..n and the SWA KV of the nodes that
   overlap its last ``W - 1`` tokens (the lock's *floor*: the first position it needs live; the node
   across the floor is split so that no more is pinned). A lock is a receipt: unlock walks the same
   nodes, and a split gives the upper half exactly the SWA holders whose floor lies inside it. As the
   request's window slides, its SWA floor follows, as read by every call but the slide itself (rule 11), so
   a request pins no more SWA KV than a window, as without a cache; and the SWA part ends once the window has
   passed the prefix. A node the floor has left
   behind is merged back into its parent where nothing tells the two apart (issue 58: one page split off per
   decode step left chains of one-page nodes, and every walk of the tree paid for them).
4. **Eviction**, least recently used first, each pool apart: full evicts unlocked leaves (their SWA
   slots go with them); SWA tombstones live nodes no SWA lock holds (a full lock does not stop it: that is
   the early part of a running request's prefix) and evicts unlocked live leaves whole. A tombstone leaf no
   lock holds can never end a match: it is pruned.
5. **Inserts** carry the request's ``swa_evicted``: tokens below it become tombstones, on chunked
   (unfinished) inserts too (#29350, #36909). Tokens the tree already holds are duplicates and go back;
   a tombstone the request still holds live SWA KV for takes the request's SWA slots first (revived).
   An insert whose new tokens are all out of the window creates no node (#22470: a live leaf over freed
   SWA slots inflated the SWA counts). So a chunked insert always ends at ``page_floor(kv_len)``.
6. **The window slide with a cache** keeps ``W`` live tokens below the insert boundary
   ``page_floor(kv_len)``, not below ``kv_len``: the leaf an insert creates always ends a match, at its end or
   one token before (a repeat's match stops short of its last token) (#29860:
   with ``page > W`` the frontier reached the boundary and the last leaf was all tombstone).
7. **Branching points.** A published prompt keeps live SWA KV only in its last window (the request slid it
   before its checkpoint, as SGLang frees a checkpoint's out-of-window slots), so a later prompt that shares
   only part of it finds the full KV but a tombstoned window, and prefills the shared part itself. Its slide
   then keeps the ``W - 1`` tokens below that *branching point* live until a checkpoint reaches it, which
   revives the tombstone there (rule 5): the next prompt sharing the same prefix hits (SGLang's
   ``swa_branching_seqlen``; docs/FINDINGS.md #10).
8. **Batched slides.** A scheduler step slides every request's window in one ``slide_windows`` call, and the SWA
   slots that leave go back in one ``free_swa`` for the whole batch, as the scheduler frees them without a cache
   (issue 58: a ``free_swa`` per request cost 28 % of decode throughput at batch 32). Every bound is computed first
   and only then is anything freed, so a refused free changes nothing; each request's lock then follows its window
   (rule 3). The same slots leave as with one call per request (``tests/test_radix_cache.py``).
9. **The slots held** (``tree_slots``: the eviction ledger reads them before and after every eviction) are walked
   again only after a node is added, deleted, tombstoned or revived: a split, a shift or a merge moves slots between
   nodes and changes neither set, so the ``after`` of one eviction is the ``before`` of the next in a decode run
   (issue 58). ``sanity_check`` holds the kept answer to a fresh walk.
10. **One free per insert.** The slots an insert gives back (each duplicate node's, and for a finished request its
   own tail past the insert) go back in one ``free`` at its end (``_one_free``), not one per node: a free validates
   both pools, and a finished request made two or three of them (issue 58). Nothing between reads the free lists;
   a free that would be refused is refused with the slots of every node in it.
11. **Floors settle when read.** A decode step's slide (rule 8) frees the window's SWA slots at once but does not move
   the SWA locks: it notes each request whose lock has a step to take, and the next call that reads or changes the
   tree's locks, sizes or nodes (every public method but ``slide_windows``, ``evictable_size``, ``protected_size``
   and ``tree_slots``, which floors never change) first moves each noted lock to where its window is then
   (``settle_locks``), in one ``_follow_window`` however many steps it owes. Until then a noted lock pins more SWA
   KV than its window, but nothing can see it: an eviction, a size, a match, an insert, a lock or an audit settles
   first, so each reads the same locks and counts as if every floor had moved at every step (rule 3's "no more than
   a window" holds wherever it is read). A receipt (``req.prefix_lock``) read straight from the request is current
   only after such a call: ``settle_locks`` is the public one. Why: rule 3's floor walk ran once per request per
   step in its first window of decode (about 480 tree edits in a batch-32 run of 128 tokens, the cache's largest
   per-step cost, issue 58); the engine's decode reads none of it until an eviction or a request's end, so a lock
   settles once per eviction or finish instead of once a step.

Accounting, per pool: free + evictable + protected + what running requests own = size; ``sanity_check``
recounts every total from the nodes.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from harness.mem.build import HybridPool
from harness.mem.contracts import CacheRequest, KVAllocator, PrefixCache, PrefixMatch, TreeSlots
from harness.mem.errors import PoolError
from harness.mem.index import LOC_DTYPE
from harness.mem.req_to_token_pool import ReqToTokenPool
from harness.seams import seam


@dataclass(eq=False)
class TreeNode:
    """``key`` (token ids) and ``value`` (their full slots) of one edge; ``end`` is its depth in tokens."""

    key: list[int]
    value: torch.Tensor
    end: int
    parent: TreeNode | None = None
    children: dict[tuple[int, ...], TreeNode] = field(default_factory=dict)
    swa_tombstone: bool = False
    full_lock_ref: int = 0
    swa_locks: Counter[int] = field(default_factory=Counter)  # SWA lock holders, by their floor
    last_access: int = 0

    @property
    def start(self) -> int:
        return self.end - len(self.key)

    @property
    def swa_lock_ref(self) -> int:
        return sum(self.swa_locks.values())

    @property
    def swa_live(self) -> bool:
        return not self.swa_tombstone


@dataclass(frozen=True)
class TreeLock:
    """What a request holds on the tree: full KV of root..node, SWA KV from ``swa_floor`` on (None: released)."""

    node: TreeNode
    swa_floor: int | None


@dataclass(frozen=True)
class InsertResult:
    node: TreeNode  # where the insert ended
    length: int  # tokens the tree holds for the key from the root to ``node``


_NO_HOLDERS: Counter[int] = Counter()  # read only: the SWA holders of a node no lock holds


def page_floor(n: int, page_size: int) -> int:
    return n // page_size * page_size


def joined(a: torch.Tensor, b: torch.Tensor, n: int | None = None) -> torch.Tensor:
    """``torch.cat((a, b[:n]))`` of two node values. Where ``b`` continues ``a`` in one storage (the two halves of a
    split, which is what the floor's shift and a merge usually join again), a wider view of ``a`` instead: the same
    values without a copy or a new tensor (issue 58: the floor's shift joins a page a step for every request it
    follows)."""
    n = b.shape[0] if n is None else n
    if (
        b.storage_offset() == a.storage_offset() + a.shape[0]
        and a.is_contiguous()
        and b.is_contiguous()
        and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    ):
        return a.as_strided((a.shape[0] + n,), (1,))
    return torch.cat((a, b[:n]))


class RadixCache:
    """The harness's ``PrefixCache`` (``harness.mem.contracts``): see the module docstring for its rules."""

    checkpoint_frees_window = False  # the caller slides first; an insert lays the freed tokens as tombstones

    def __init__(
        self, allocator: KVAllocator, req_to_token_pool: ReqToTokenPool, *, sliding_window_size: int | None
    ) -> None:
        if sliding_window_size is not None and sliding_window_size < 1:
            raise ValueError(f"sliding_window_size must be >= 1 or None, got {sliding_window_size}")
        self.allocator = allocator
        self.req_to_token_pool = req_to_token_pool
        self.page_size = allocator.page_size
        self.sliding_window_size = sliding_window_size
        self._clock = itertools.count(1)
        self._held_frees: list[torch.Tensor] | None = None  # rule 10: slots an insert gives back, freed at its end
        self._unsettled: dict[int, CacheRequest] = {}  # rule 11: requests whose SWA lock owes its window a step
        self._new_tree()

    def _new_tree(self) -> None:
        self.root = TreeNode([], value=torch.empty(0, dtype=LOC_DTYPE, device=self.allocator.device), end=0)
        self.root.full_lock_ref = 1  # never evicted
        self._evictable = self._protected = self._swa_evictable = self._swa_protected = 0
        self._slots: TreeSlots | None = None  # rule 9: tree_slots' answer until a node comes, goes or changes state

    # -- sizes -----------------------------------------------------------------------------------

    def evictable_size(self) -> int:
        return self._evictable

    def protected_size(self) -> int:
        return self._protected

    def swa_evictable_size(self) -> int:
        self.settle_locks()
        return self._swa_evictable

    def swa_protected_size(self) -> int:
        self.settle_locks()
        return self._swa_protected

    def _nodes(self) -> list[TreeNode]:
        """Every node but the root, depth first (the order in which LRU ties are broken: the first one walked)."""
        nodes, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            nodes.append(node)
            stack += node.children.values()
        return nodes

    def tree_slots(self) -> TreeSlots:
        """Rule 9: walked again only after a change of either set; one ``torch.cat``, live slots first, so the live
        set is a view of the full one."""
        if self._slots is None:
            self._slots = self._walk_slots()
        return self._slots

    def _walk_slots(self) -> TreeSlots:
        live, dead, live_tokens, stack = [], [], 0, list(self.root.children.values())
        while stack:
            node = stack.pop()
            if node.swa_tombstone:
                dead.append(node.value)
            else:
                live.append(node.value)
                live_tokens += len(node.key)  # a slot per token (rule 1): an int, not a tensor's shape, is read
            stack += node.children.values()
        full = self._cat(live + dead).long()
        return TreeSlots(full=full, swa_live=full[:live_tokens])

    def _cat(self, values) -> torch.Tensor:
        """Concatenated node values. The root's empty value joins only an empty list: one empty tensor among the
        inputs sends ``torch.cat`` down its slow path (8x slower over a few hundred nodes, issue 58)."""
        parts = list(values)
        return torch.cat(parts) if parts else self.root.value.clone()

    # -- matching --------------------------------------------------------------------------------

    def match_prefix(self, token_ids: Sequence[int]) -> PrefixMatch:
        self.settle_locks()
        node, length, _ = self._match(token_ids)
        return PrefixMatch(length, self._path_values(node).to(torch.int64))

    def _match(self, token_ids: Sequence[int]) -> tuple[TreeNode, int, int]:
        """The deepest node end along ``token_ids`` where a match may stop (rule 2), and how far the tree holds
        their full KV (rule 7's branching point); the node where the key diverges is split there."""
        key = list(token_ids[: page_floor(len(token_ids), self.page_size)])
        node, pos, live_run = self.root, 0, 0
        best, best_len = self.root, 0
        while pos < len(key) and (child := self._descend(node, key, pos)) is not None:
            n = len(child.key)
            live_run = live_run + n if child.swa_live else 0
            node, pos = child, pos + n
            if self._window_live(pos, live_run):
                best, best_len = node, pos
        self._touch(best)
        return best, best_len, pos

    def _descend(self, node: TreeNode, key: Sequence[int], pos: int, *, cut: int | None = None) -> TreeNode | None:
        """The child of ``node`` that ``key[pos:]`` continues into, split where the key leaves it (and at position
        ``cut``, if that falls inside a tombstone); None where no child starts with ``key``'s next page."""
        child = node.children.get(self._child_key(key, pos))
        if child is None:
            return None
        n = self._common_len(child.key, key, pos)
        if cut is not None and child.swa_tombstone and pos < cut < pos + n:
            n = cut - pos
        return self._split(child, n) if n < len(child.key) else child

    def _window_live(self, pos: int, live_run: int) -> bool:
        window = self.sliding_window_size
        return window is None or live_run >= min(pos, window - 1)

    def _child_key(self, key: Sequence[int], pos: int) -> tuple[int, ...]:
        return tuple(key[pos : pos + self.page_size])

    def _common_len(self, node_key: list[int], key: Sequence[int], pos: int) -> int:
        if key[pos : pos + len(node_key)] == node_key:  # the whole node: one comparison (an insert's duplicates)
            return page_floor(len(node_key), self.page_size)
        n = 0
        for a, b in zip(node_key, key[pos:]):
            if a != b:
                break
            n += 1
        return page_floor(n, self.page_size)

    def _path_values(self, node: TreeNode) -> torch.Tensor:
        values = []
        while node is not self.root:
            values.append(node.value)
            node = node.parent
        return self._cat(reversed(values))

    def _touch(self, node: TreeNode) -> None:
        stamp = next(self._clock)
        while node is not self.root:
            node.last_access = stamp
            node = node.parent

    def _split(self, child: TreeNode, n: int) -> TreeNode:
        """Cut ``child`` after its first ``n`` tokens; the new upper node is returned, ``child`` keeps the rest."""
        upper = TreeNode(
            child.key[:n],
            value=child.value[:n],
            end=child.start + n,
            parent=child.parent,
            swa_tombstone=child.swa_tombstone,
            full_lock_ref=child.full_lock_ref,
            last_access=child.last_access,
        )
        upper.swa_locks = Counter({f: c for f, c in child.swa_locks.items() if f < upper.end})
        if child.swa_live and child.swa_lock_ref and not upper.swa_lock_ref:  # the floor fell inside child
            self._swa_protected -= n
            self._swa_evictable += n
        child.parent.children[self._child_key(child.key, 0)] = upper
        child.key, child.value, child.parent = child.key[n:], child.value[n:], upper
        upper.children[self._child_key(child.key, 0)] = child
        return upper

    # -- locks -----------------------------------------------------------------------------------

    def lock(self, node: TreeNode) -> TreeLock:
        self.settle_locks()
        walk = node
        while walk is not self.root:
            self._inc_full(walk)
            walk = walk.parent
        if self.sliding_window_size is None or node is self.root:
            return TreeLock(node, None)
        return self._hold_swa(node, max(0, node.end - (self.sliding_window_size - 1)))

    def _hold_swa(self, node: TreeNode, floor: int) -> TreeLock:
        """Pin the SWA KV of positions ``floor ..`` on the path to ``node`` (whole nodes, split at the floor's page)."""
        self._split_at(node, page_floor(floor, self.page_size))
        walk = node
        while walk is not self.root and walk.end > floor:
            self._add_swa_holder(walk, floor)
            walk = walk.parent
        return TreeLock(node, floor)

    def _split_at(self, node: TreeNode, position: int) -> None:
        """Make ``position`` a node boundary on the path to ``node`` (so a lock pins no SWA below its floor)."""
        while node is not self.root and node.start >= position:
            if node.start == position:
                return
            node = node.parent
        if node is not self.root and node.start < position < node.end:
            self._split(node, position - node.start)

    def unlock(self, lock: TreeLock | None) -> None:
        self.settle_locks()
        if lock is None:
            return
        self.release_swa(lock)
        walk = lock.node
        while walk is not self.root:
            self._dec_full(walk)
            walk = walk.parent
        self._prune(lock.node)

    def release_swa(self, lock: TreeLock) -> TreeLock:
        """Drop the SWA part of ``lock`` (the window has passed it); the full part stays."""
        self.settle_locks()
        if lock.swa_floor is None:
            return lock
        walk = lock.node
        while walk is not self.root and walk.end > lock.swa_floor:
            self._drop_swa_holder(walk, lock.swa_floor)
            walk = walk.parent
        return TreeLock(lock.node, None)

    def _inc_full(self, node: TreeNode) -> None:
        if node.full_lock_ref == 0:
            self._evictable -= len(node.key)
            self._protected += len(node.key)
        node.full_lock_ref += 1

    def _dec_full(self, node: TreeNode) -> None:
        if node.full_lock_ref <= 0:
            raise PoolError(f"unlock of a node with no full lock (tokens {node.start}..{node.end - 1})")
        node.full_lock_ref -= 1
        if node.full_lock_ref == 0:
            self._protected -= len(node.key)
            self._evictable += len(node.key)

    def _add_swa_holder(self, node: TreeNode, floor: int) -> None:
        if node.swa_live and not node.swa_lock_ref:
            self._swa_evictable -= len(node.key)
            self._swa_protected += len(node.key)
        node.swa_locks[floor] += 1

    def _drop_swa_holder(self, node: TreeNode, floor: int) -> None:
        if node.swa_locks[floor] <= 0:
            raise PoolError(
                f"SWA unlock (floor {floor}) of a node it does not hold (tokens {node.start}..{node.end - 1})"
            )
        node.swa_locks[floor] -= 1
        if not node.swa_locks[floor]:
            del node.swa_locks[floor]
        if node.swa_live and not node.swa_lock_ref:
            self._swa_protected -= len(node.key)
            self._swa_evictable += len(node.key)

    # -- requests ----------------------------------------------------------------------------------

    def admit(self, req: CacheRequest, token_ids: Sequence[int]) -> int:
        self.settle_locks()
        if req.req_pool_idx is None or req.slots_len or req.prefix_lock is not None:
            raise PoolError("admit: the request must hold a row and nothing else")
        node, n, full = self._match(list(token_ids)[:-1])
        req.prefix_lock = self.lock(node)
        if n:
            self.req_to_token_pool.write(req.req_pool_idx, 0, self._path_values(node))
        req.kv_len = req.slots_len = req.cache_protected_len = n
        req.swa_evicted = 0
        req.swa_branch = full if full > n else 0  # rule 7
        return n

    def cache_unfinished_req(self, req: CacheRequest) -> None:
        self.settle_locks()
        result = self._insert_request(req, finished=False)
        lo, hi = req.cache_protected_len, result.length
        if hi > lo:
            self.req_to_token_pool.write(req.req_pool_idx, lo, self._path_values(result.node)[lo:])
        self.unlock(req.prefix_lock)
        req.prefix_lock = self.lock(result.node)
        req.cache_protected_len = hi

    def cache_finished_req(self, req: CacheRequest) -> None:
        self.settle_locks()
        with self._one_free():  # rule 10: the duplicates and the request's own tail in one call
            result = self._insert_request(req, finished=True)
            self._free_own(req, max(result.length, req.cache_protected_len))
        self.unlock(req.prefix_lock)
        req.prefix_lock = None

    def release_req(self, req: CacheRequest) -> None:
        self.settle_locks()
        self._free_own(req, req.cache_protected_len)
        self.unlock(req.prefix_lock)
        req.prefix_lock = None

    def _free_own(self, req: CacheRequest, start: int) -> None:
        if req.slots_len > start:
            self._give_back(self.req_to_token_pool.req_to_token[req.req_pool_idx, start : req.slots_len].clone())

    @contextmanager
    def _one_free(self) -> Iterator[None]:
        """Rule 10: every slot ``_give_back`` is handed inside goes back in one ``free`` when the block ends (a
        block inside another joins the outer one). A block that raises frees nothing: the tree is then in no state to
        say what is free."""
        if self._held_frees is not None:
            yield
            return
        self._held_frees = held = []
        try:
            yield
        finally:
            self._held_frees = None
        if held:
            self.allocator.free(torch.cat(held) if len(held) > 1 else held[0])

    def _give_back(self, slots: torch.Tensor) -> None:
        """Free ``slots`` (the caller's own copy), at the end of the enclosing ``_one_free`` block if there is one."""
        if self._held_frees is None:
            self.allocator.free(slots)
        else:
            self._held_frees.append(slots)

    @seam("chunked-insert-drops-swa-evicted")
    def _insert_request(self, req: CacheRequest, *, finished: bool) -> InsertResult:
        """Insert the request's whole pages of KV, its out-of-window tokens as tombstones (rule 5)."""
        end = page_floor(req.kv_len, self.page_size)
        values = self.req_to_token_pool.req_to_token[req.req_pool_idx, :end].clone()
        return self.insert(
            req.fill_ids[:end], values, prev_prefix_len=req.cache_protected_len, swa_evicted_seqlen=req.swa_evicted
        )

    def insert(
        self, key: Sequence[int], values: torch.Tensor, *, prev_prefix_len: int, swa_evicted_seqlen: int
    ) -> InsertResult:
        """Insert ``key`` with full slots ``values`` (one per token, whole pages). Positions below
        ``prev_prefix_len`` are the tree's already; above it the slots are the caller's: those the tree
        holds already (duplicates) go back to the allocator, those past the returned length stay the caller's."""
        self.settle_locks()
        node, pos = self.root, 0
        with self._one_free():  # rule 10: the duplicates of every node in one call
            # Where the request's live part starts inside a tombstone, that node is cut there and each side taken apart.
            while pos < len(key) and (child := self._descend(node, key, pos, cut=swa_evicted_seqlen)) is not None:
                n = len(child.key)
                if pos >= prev_prefix_len:
                    self._take_or_free(child, values[pos : pos + n], live=pos >= swa_evicted_seqlen)
                node, pos = child, pos + n
            if pos < len(key):
                node, pos = self._add_new(node, key, values, pos, swa_evicted_seqlen)
        self._touch(node)
        return InsertResult(node, pos)

    def _take_or_free(self, node: TreeNode, own: torch.Tensor, *, live: bool) -> None:
        """The caller's slots ``own`` duplicate ``node``'s and go back. Where the node is a tombstone and the
        caller still holds live SWA KV for the same tokens, the tree first takes those SWA slots: its full
        slots are mapped to them (the K/V there is of the same tokens at the same positions), which revives
        the node without touching the full slots other requests may read."""
        own = own.clone()
        if node.swa_tombstone and live:
            mapping = self.allocator.full_to_swa_index_mapping
            self.allocator.set_full_to_swa_mapping(node.value.clone(), mapping[own.long()].to(own.dtype))
            self.allocator.set_full_to_swa_mapping(own, torch.zeros_like(own))
            node.swa_tombstone = False
            self._slots = None
            if node.swa_lock_ref:
                self._swa_protected += len(node.key)
            else:
                self._swa_evictable += len(node.key)
        self._give_back(own)

    @seam("swa-frontier-reaches-insert-boundary")
    def _add_new(
        self, parent: TreeNode, key: Sequence[int], values: torch.Tensor, pos: int, swa_evicted_seqlen: int
    ) -> tuple[TreeNode, int]:
        """New nodes for ``key[pos:]``: a tombstone up to ``swa_evicted_seqlen``, then a live leaf. With no
        live token the leaf could never end a match: nothing is added, the slots stay the caller's (#22470)."""
        end = len(key)
        if swa_evicted_seqlen >= end:
            return parent, pos
        if pos < swa_evicted_seqlen:
            parent = self._new_child(parent, key, values, pos, swa_evicted_seqlen, tombstone=True)
            pos = swa_evicted_seqlen
        return self._new_child(parent, key, values, pos, end, tombstone=False), end

    def _new_child(
        self, parent: TreeNode, key: Sequence[int], values: torch.Tensor, start: int, end: int, *, tombstone: bool
    ) -> TreeNode:
        node = TreeNode(
            list(key[start:end]),
            value=values[start:end].clone(),
            end=end,
            parent=parent,
            swa_tombstone=tombstone,
            last_access=next(self._clock),
        )
        parent.children[self._child_key(node.key, 0)] = node
        self._slots = None
        self._evictable += end - start
        if not tombstone:
            self._swa_evictable += end - start
        return node

    # -- the window ----------------------------------------------------------------------------------

    def slide_windows(self, reqs: Sequence[CacheRequest]) -> None:
        """Rule 8: every request's out-of-window SWA slots in one ``free_swa``; each lock that has a step to take
        (``_follow_window``'s own test, read here) is noted, and follows its window at the next call that reads the
        locks (rule 11). One pass over the batch reads every bound (issue 58)."""
        if self.sliding_window_size is None:
            return
        edge, page = self.sliding_window_size - 1, self.page_size
        keep_from = self.swa_keep_from  # a seam: looked up once, called per request
        bounds, leaving, unsettled = [], [], self._unsettled
        for req in reqs:  # _window_bounds, inline: a decode step runs this for every request
            keep, protected = keep_from(req.kv_len), req.cache_protected_len
            if protected < req.swa_branch:  # rule 7: the window below the branching point waits for the tree
                keep = min(keep, max(0, req.swa_branch - edge) // page * page)
            own = req.swa_evicted if req.swa_evicted > protected else protected
            bounds.append(keep)
            if keep > own:
                leaving.append((req.req_pool_idx, own, keep))
            lock = req.prefix_lock
            if lock is not None and lock.swa_floor is not None and req.kv_len - edge > lock.swa_floor:
                unsettled[id(req)] = req  # rule 11: the lock follows at the next call that reads it
        if leaving:
            self.allocator.free_swa(self.req_to_token_pool.read_tokens(leaving))
        for req, keep in zip(reqs, bounds):
            if keep > req.swa_evicted:
                req.swa_evicted = keep

    def settle_locks(self) -> None:
        """Rule 11: move every SWA lock a slide has noted to its window's floor now (each in one ``_follow_window``,
        in the order the slides noted them). Every public method that reads or changes locks, SWA sizes or nodes
        calls it first; a caller that reads a request's receipt (``req.prefix_lock``) straight after a slide calls it
        itself."""
        if self._unsettled:
            unsettled, self._unsettled = self._unsettled, {}
            for req in unsettled.values():
                self._follow_window(req)

    @seam("swa-lock-release-skipped")
    def _follow_window(self, req: CacheRequest) -> None:
        """Move the request's SWA lock up to its window's floor; drop it once the window has passed the prefix."""
        lock, needed = req.prefix_lock, max(0, req.kv_len - (self.sliding_window_size - 1))
        if lock is not None and lock.swa_floor is not None and needed > lock.swa_floor:
            if needed < req.cache_protected_len:
                req.prefix_lock = self._raise_swa_floor(lock, needed)
            else:
                req.prefix_lock = self.release_swa(lock)
                self._merge_into(lock.node)

    def _raise_swa_floor(self, lock: TreeLock, floor: int) -> TreeLock:
        """``release_swa`` then ``_hold_swa(lock.node, floor)`` in one walk (the same holders and counts after): split
        at the new floor's page, drop the holder from the nodes now below the floor, re-key it on the rest, and merge
        the piece left behind into its parent (``_merge_into``). Where that merge is sure to happen, the piece moves
        from the node across the floor to its parent directly (``_shift_below``): the same tree, without a node made
        and merged away at every decode step of every request (issue 58)."""
        old, boundary, dropped = lock.swa_floor, page_floor(floor, self.page_size), None
        across = self._shift_candidate(lock.node, old, boundary)
        if across is not None:
            self._rekey_swa_holder(lock.node, across, old, floor)
            self._shift_below(across, boundary)
            return TreeLock(lock.node, floor)
        self._split_at(lock.node, boundary)
        walk = lock.node
        while walk is not self.root and walk.end > old:
            if walk.end > floor:  # still pinned: only the receipt's floor changes, no count moves
                self._rekey_swa_holder(walk, walk, old, floor)
            else:
                self._drop_swa_holder(walk, old)
                if walk.end == boundary:
                    dropped = walk
            walk = walk.parent
        if dropped is not None:
            self._merge_into(dropped)
        return TreeLock(lock.node, floor)

    def _rekey_swa_holder(self, node: TreeNode, last: TreeNode, old: int, floor: int) -> None:
        """Re-key a holder from floor ``old`` to ``floor`` on the nodes from ``node`` up to ``last``: they stay pinned,
        only the receipt's floor changes, no count moves."""
        while True:
            held = node.swa_locks
            count = held.get(old, 0)
            if count <= 0:
                raise PoolError(
                    f"SWA unlock (floor {old}) of a node it does not hold (tokens {node.start}..{node.end - 1})"
                )
            if count == 1:
                del held[old]
            else:
                held[old] = count - 1
            held[floor] = held.get(floor, 0) + 1
            if node is last:
                return
            node = node.parent

    def _shift_candidate(self, node: TreeNode, old: int, boundary: int) -> TreeNode | None:
        """The node across ``boundary`` on the path to ``node`` when the slow path would split it there, drop the
        holder from the piece below and merge that piece into the parent (the parent below the old floor, its only
        child, the same full locks and SWA state, the same SWA holders as the piece once it lets go); else None."""
        across, root = node, self.root
        while across is not root and across.end - len(across.key) >= boundary:
            across = across.parent
        parent, start = across.parent, across.end - len(across.key)
        if across is root or parent is root or not start < boundary < across.end:
            return None
        held = across.swa_locks
        if start > old or held[old] <= 0:
            return None
        if len(held) == 1 and held[old] == 1:  # the common case: this lock alone holds the node
            return across if self._joins(parent, across, _NO_HOLDERS) else None
        below = Counter({f: c for f, c in held.items() if f < boundary})
        below[old] -= 1
        return across if self._joins(parent, across, +below) else None

    def _shift_below(self, across: TreeNode, boundary: int) -> None:
        """Move ``across``'s tokens below ``boundary`` to its parent (``_shift_candidate`` said they merge there); the
        tokens leave the holder's pin, so live SWA KV that no holder keeps becomes evictable."""
        parent, key, value = across.parent, across.key, across.value
        n = boundary - (across.end - len(key))
        if not across.swa_tombstone and not parent.swa_lock_ref:
            self._swa_protected -= n
            self._swa_evictable += n
        del parent.children[self._child_key(key, 0)]
        parent.key, parent.value = parent.key + key[:n], joined(parent.value, value, n)
        parent.end, parent.last_access = boundary, max(parent.last_access, across.last_access)
        across.key, across.value = key[n:], value[n:]
        parent.children[self._child_key(across.key, 0)] = across
        self._merge_into(parent)  # as the slow path's merge goes on up (a settle may shift past a node left apart)

    def _joins(self, parent: TreeNode, node: TreeNode, swa_locks: Counter[int]) -> bool:
        """Whether ``parent`` and its child ``node``, holding ``swa_locks``, read as one node to every rule: the
        parent's only child, the same full locks (so no lock ends at the parent), the same SWA state and holders."""
        return (
            parent is not self.root
            and len(parent.children) == 1
            and parent.full_lock_ref == node.full_lock_ref
            and parent.swa_tombstone == node.swa_tombstone
            and (parent.swa_locks == swa_locks if parent.swa_locks or swa_locks else True)  # two empty: no compare
        )

    def _merge_into(self, node: TreeNode) -> None:
        """Undo rule 3's split where it no longer pins anything: ``node`` takes in its parent when nothing tells the
        two apart (the parent's only child, the same full locks, so no lock ends at the parent, the same SWA state and
        holders). A floor that follows its window splits off one page per step; without this each request left a
        chain of one-page nodes behind, and every walk of the tree (evictions, their ledger) ran 4x longer (issue
        58). It goes on up while the next parent joins too: a floor that settles several steps at once (rule 11) can
        drop more than one node, and a floor moved every step would have merged each of them as it left it."""
        while self._joins(parent := node.parent, node, node.swa_locks):
            node.key, node.value = parent.key + node.key, joined(parent.value, node.value)
            node.parent, node.last_access = parent.parent, max(parent.last_access, node.last_access)
            node.parent.children[self._child_key(node.key, 0)] = node

    @seam("swa-frontier-reaches-insert-boundary", "swa-frontier-tombstones-last-leaf")
    def swa_keep_from(self, kv_len: int) -> int:
        """The first position whose SWA slot a request keeps: ``W`` tokens below the insert boundary
        ``page_floor(kv_len)``, in whole pages (rule 6), so that a match may end at the boundary or one token
        before it (a repeat of a published prompt matches all of it but its last token, whose logits it needs;
        SGLang keeps the same window past ``pre_len - 1``). Without a cache the bound is ``kv_len - W + 1``."""
        boundary = page_floor(kv_len, self.page_size)
        return page_floor(max(0, boundary - self.sliding_window_size), self.page_size)

    # -- eviction --------------------------------------------------------------------------------------

    def evict(self, *, full_tokens: int = 0, swa_tokens: int = 0) -> None:
        """Rule 4. Each pool's candidates are walked once into a heap ordered as a fresh LRU scan would pick them (least
        recent first, ties to the first node walked): a scan per node freed cost a decode step at batch 32 more than
        its forward's attention (issue 58)."""
        self.settle_locks()
        alloc = self.allocator
        want = alloc.full_available_size() + full_tokens
        if alloc.full_available_size() < want:
            walked = {node: i for i, node in enumerate(self._nodes())}
            heap = [(n.last_access, i, n) for n, i in walked.items() if not n.children and not n.full_lock_ref]
            heapq.heapify(heap)
            while alloc.full_available_size() < want and heap:
                leaf = heapq.heappop(heap)[2]
                self._delete_leaf(leaf)
                up = self._surviving_ancestor(leaf)
                if up is not self.root and not up.children and not up.full_lock_ref:  # a leaf now: a candidate
                    heapq.heappush(heap, (up.last_access, walked[up], up))
        want = alloc.swa_available_size() + swa_tokens
        if alloc.swa_available_size() < want:  # taking one never makes another eligible: one sorted walk
            live = sorted((n for n in self._nodes() if n.swa_live and not n.swa_lock_ref), key=lambda n: n.last_access)
            for node in live:
                if alloc.swa_available_size() >= want:
                    break
                if not node.children and not node.full_lock_ref:
                    self._delete_leaf(node)
                else:
                    self._tombstone(node)

    def _surviving_ancestor(self, node: TreeNode) -> TreeNode:
        """The nearest ancestor of a deleted node still in the tree (``_prune`` may have deleted some above it)."""
        up = node.parent
        while up is not self.root and up.parent.children.get(self._child_key(up.key, 0)) is not up:
            up = up.parent
        return up

    def _delete_leaf(self, leaf: TreeNode) -> None:
        """Delete an unlocked leaf (its live SWA slots go with it) and the tombstones it leaves as leaves (``_prune``),
        their slots freed in one call before the tree changes: a free per node cost an eviction a second validation
        of both pools (issue 58)."""
        gone, up = [leaf], leaf.parent
        while self._prunable(up, children=1):
            gone.append(up)
            up = up.parent
        self._free_nodes(gone)
        for node in gone:
            del node.parent.children[self._child_key(node.key, 0)]
            self._evictable -= len(node.key)
            if node.swa_live:
                self._swa_evictable -= len(node.key)
        self._slots = None

    @seam("evict-frees-sink-swa")
    def _free_nodes(self, nodes: list[TreeNode]) -> None:
        """Deleted nodes' full slots, and the SWA slots they map to where live: the allocator's ``free`` skips the
        entries that read 0 (a tombstone's, mapped to the sink), so slot 0 never goes on a free list (#38519)."""
        self.allocator.free(self._cat(node.value for node in nodes) if len(nodes) > 1 else nodes[0].value)

    def _prunable(self, node: TreeNode, *, children: int = 0) -> bool:
        """A tombstone no lock holds, with no children but the ``children`` about to go, can never end a match."""
        return (
            node is not self.root and len(node.children) == children and node.swa_tombstone and not node.full_lock_ref
        )

    def _prune(self, node: TreeNode) -> None:
        """A tombstone leaf no lock holds can never end a match: delete it (and the next ones up)."""
        if self._prunable(node):
            self._delete_leaf(node)

    def _tombstone(self, node: TreeNode) -> None:
        self.allocator.free_swa(node.value)
        node.swa_tombstone = True
        self._slots = None
        self._swa_evictable -= len(node.key)

    def reset(self) -> None:
        self.settle_locks()
        if self._protected:
            raise PoolError(f"reset: {self._protected} cached tokens are still locked by running requests")
        slots = self.tree_slots().full
        if slots.numel():
            self.allocator.free(slots.to(LOC_DTYPE))
        self._new_tree()

    # -- audit -----------------------------------------------------------------------------------------

    def sanity_check(self) -> None:
        """Recount every total from the nodes, and check each node against the pool (rule 1) and its locks."""
        self.settle_locks()
        counts = Counter()
        mapping = self.allocator.full_to_swa_index_mapping
        for node in self._nodes():
            size = len(node.key)
            if size == 0 or size % self.page_size or node.value.numel() != size:
                raise PoolError(f"node {node.start}..{node.end - 1}: {size} tokens, {node.value.numel()} slots")
            if node.parent is not self.root and node.start != node.parent.end:
                raise PoolError(f"node {node.start}..{node.end - 1} does not start where its parent ends")
            if node.full_lock_ref > node.parent.full_lock_ref and node.parent is not self.root:
                raise PoolError(f"node {node.start}..{node.end - 1} is locked more than its parent")
            live = mapping[node.value.long()] != 0
            if bool(live.all()) != node.swa_live or (node.swa_tombstone and bool(live.any())):
                raise PoolError(
                    f"node {node.start}..{node.end - 1}: swa_tombstone={node.swa_tombstone} but "
                    f"{int(live.sum())} of its {size} tokens hold SWA slots"
                )
            if not node.children and node.swa_tombstone and not node.full_lock_ref:
                raise PoolError(
                    f"leaf {node.start}..{node.end - 1} is a tombstone no request holds: it can never end a match"
                )
            counts["protected" if node.full_lock_ref else "evictable"] += size
            if node.swa_live:
                counts["swa_protected" if node.swa_lock_ref else "swa_evictable"] += size
        kept = {
            "evictable": self._evictable,
            "protected": self._protected,
            "swa_evictable": self._swa_evictable,
            "swa_protected": self._swa_protected,
        }
        for name, value in kept.items():
            if counts[name] != value:
                raise PoolError(f"{name}_size is {value}, the nodes hold {counts[name]}")
        slots = self._walk_slots()
        if slots.full.unique().numel() != slots.full.numel():
            raise PoolError("a full slot is held by two tree nodes")
        kept = self._slots
        if kept is not None and not all(
            torch.equal(a.sort().values, b.sort().values)
            for a, b in ((kept.full, slots.full), (kept.swa_live, slots.swa_live))
        ):
            raise PoolError("tree_slots kept an answer the tree no longer gives (rule 9: a change did not reset it)")


def build_radix_cache(memory: HybridPool, *, sliding_window_size: int | None) -> PrefixCache:
    return RadixCache(memory.allocator, memory.req_to_token_pool, sliding_window_size=sliding_window_size)


@dataclass(frozen=True)
class CacheBuilder:
    """How an engine gets a target's prefix cache (as it takes a pool builder), and how many windows of SWA KV that
    cache's policy lets one request hold between steps: the engine sizes its SWA pool for that many."""

    build: Callable[..., PrefixCache]  # (memory: HybridPool, *, sliding_window_size) -> PrefixCache
    swa_windows_held: int = 1  # this cache's SWA lock follows the window (rule 3)


RADIX_CACHE = CacheBuilder(build_radix_cache)
