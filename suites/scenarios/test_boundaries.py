"""Every limit at its exact boundary (issue 31): a request that fills the context to its last slot, decode rows at
b-1, b and b+1 of every KV bucket (the largest included), prefill batches of exactly the step's token budget, and a
workload far larger than the pools. Each must finish, on the graph path, with the tokens the eager engine gives, on
any target's memory (``--target sglang``: SGLang's pool and allocator under the engine)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from fixtures.checkpoints import random_sequences
from fixtures.scenarios.boundaries import context_filling_requests, edges_around
from harness.engine import RequestError, SamplingParams
from harness.engine.model_runner import kv_len_buckets
from fixtures.checkpoints import untied_checkpoint

CONTEXT = 128  # KV buckets [64, 128]


def _greedy(new: int) -> SamplingParams:
    return SamplingParams(max_new_tokens=new, ignore_eos=True)


def make_engine(target, graphs: str, **limits):
    config = {**dict(max_running_requests=32, chunk_size=16, max_prefill_tokens=64), **limits}
    return target.make_engine(untied_checkpoint("gemma2"), graphs=graphs, **config)


@pytest.fixture(scope="module")
def engines(target):
    return {graphs: make_engine(target, graphs, max_context_len=CONTEXT) for graphs in ("off", "tape")}


def _runs_to_length_like_eager(engines, prompt: list[int], new: int) -> dict[str, int]:
    """Generate ``new`` tokens on the tape engine: they must run to length and equal the eager engine's; the forward
    paths this request took (path -> forwards)."""
    tape, off = engines["tape"], engines["off"]
    before = dict(tape.runner.paths)
    out = tape.generate([prompt], _greedy(new))[0]
    ran = {k: v - before.get(k, 0) for k, v in tape.runner.paths.items()}
    assert len(out.output_ids) == new and out.finish_reason == "length"
    assert out.output_ids == off.generate([prompt], _greedy(new))[0].output_ids
    return ran


def test_the_buckets_are_what_this_file_assumes() -> None:
    assert kv_len_buckets(CONTEXT) == [64, CONTEXT]
    assert edges_around(kv_len_buckets(CONTEXT), high=CONTEXT - 1) == [63, 64, 65, 127]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=context_filling_requests(kv_len_buckets(CONTEXT), CONTEXT))
def test_drawn_requests_at_the_edges_finish_on_graphs_like_eager(engines, request: tuple[int, int]) -> None:
    prompt_len, new = request
    prompt = random_sequences([prompt_len], seed=prompt_len + 1000 * new)[0]
    ran = _runs_to_length_like_eager(engines, prompt, new)
    assert ran.get("decode-eager", 0) == 0, ran


@pytest.mark.parametrize("prompt_len", [40, 63, 64, 65, 100, 126])
def test_a_request_that_fills_the_context_exactly_finishes_on_graphs(engines, prompt_len: int) -> None:
    """prompt + max_new_tokens = context + 1 (the last token is sampled, never cached): its last decode row reads
    exactly CONTEXT keys, the largest bucket's length; on the way it crosses 63, 64 and 65 where the prompt allows."""
    new = CONTEXT + 1 - prompt_len
    prompt = random_sequences([prompt_len], seed=prompt_len)[0]
    ran = _runs_to_length_like_eager(engines, prompt, new)
    assert ran.get("decode-eager", 0) == 0 and ran.get("decode-graph", 0) == new - 1, ran  # every row had a bucket
    with pytest.raises(RequestError, match=f"needs {CONTEXT + 1} tokens of context"):
        engines["tape"].add_request(prompt, _greedy(new + 1))


@pytest.mark.parametrize("tokens", [63, 64, 65])
def test_a_prefill_of_exactly_the_step_budget_finds_an_extend_graph(target, tokens: int) -> None:
    """max_prefill_tokens = 64: a 64-token prefill is one extend at the budget, 65 is 64 + 1, 63 is under it."""
    tape = make_engine(target, "tape", max_context_len=CONTEXT, chunk_size=64, max_prefill_tokens=64)
    off = make_engine(target, "off", max_context_len=CONTEXT, chunk_size=64, max_prefill_tokens=64)
    prompt = random_sequences([tokens], seed=tokens)[0]
    out = tape.generate([prompt], _greedy(4))[0]
    assert out.output_ids == off.generate([prompt], _greedy(4))[0].output_ids
    assert tape.runner.paths.get("extend-eager", 0) == 0 and tape.runner.paths["extend-graph"] >= 1, tape.runner.paths


@pytest.mark.parametrize("graphs", ["off", "tape"])
def test_a_workload_larger_than_the_pools_drains_and_admission_covers_what_each_request_may_still_grow_to(
    target, graphs
):
    """24 requests needing 1172 tokens through a 160-slot full pool: every request finishes by length, and after every
    step the free full slots and what the prefix cache can evict cover what the running requests may still grow to
    (prompt + max_new_tokens - 1, less what each holds, its cached prefix included), counted from the requests
    themselves, not from the scheduler's own reservations."""
    engine = make_engine(target, graphs, max_context_len=64, full_pool_size=160, max_running_requests=8)
    prompts = random_sequences([20 + (i * 7) % 20 for i in range(24)], seed=5)
    new = 20
    reqs = [engine.add_request(p, _greedy(new)) for p in prompts]
    assert sum(len(p) + new for p in prompts) > 7 * engine.scheduler.allocator.size  # far beyond the pool
    outputs, steps = [], 0
    while engine.scheduler.has_work():
        outputs += engine.step().finished
        steps += 1
        growth = sum(len(r.prompt_ids) + r.sampling.max_new_tokens - 1 - r.slots_len for r in engine.scheduler.running)
        cache = engine.tree_cache
        free = engine.scheduler.allocator.full_available_size() + (cache.evictable_size() if cache is not None else 0)
        assert growth <= free, (
            f"step {steps}: running requests may still grow by {growth} slots, {free} are free or evictable"
        )
    assert sorted(o.rid for o in outputs) == sorted(r.rid for r in reqs)
    assert all(o.finish_reason == "length" and len(o.output_ids) == new for o in outputs)
    assert engine.pools_idle()
