"""Invariant 5: pool accounting. While requests run no slot is owned twice and counts add up; after
every request finishes every slot of both pools is free again, or the prefix cache's (which gives it back
on a flush)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from fixtures.checkpoints import untied_checkpoint
from fixtures.scenarios.padding import MixedBatch, mixed_batch_cases, mixed_batches
from harness.engine import Engine, SamplingParams
from suites.conftest import ENGINE_LIMITS, examples
from suites.hooks import on_every_forward, recovering

WINDOW = 6


def audit_ownership(engine: Engine) -> None:
    """Each full slot is free, a running request's own (its row past its cached prefix) or the prefix cache's,
    never two of these; the same for live SWA slots; and the counts add up (page size 1)."""
    runner, running, cache = engine.runner, engine.scheduler.running, engine.tree_cache
    alloc, rt = runner.allocator, runner.req_to_token_pool.req_to_token
    tree = cache.tree_slots() if cache is not None else None
    empty = torch.empty(0, dtype=torch.int64)
    owned = [rt[r.req_pool_idx, r.cache_protected_len : r.slots_len].long() for r in running]
    full = torch.cat([empty, *owned, tree.full if tree is not None else empty])
    assert full.unique().numel() == full.numel(), "a full slot is owned by two tokens (or by a request and the cache)"
    assert bool(alloc.full_attn_allocator.is_allocated(full).all()), "a token owns a full slot the allocator calls free"
    assert alloc.full_available_size() + full.numel() == alloc.size, "full-pool counts do not add up"
    for r in running:
        prefix = rt[r.req_pool_idx, : r.cache_protected_len].long()
        assert bool(torch.isin(prefix, tree.full).all()), (
            f"request {r.rid} reads a cached prefix the cache does not hold"
        )
    swa = alloc.full_to_swa_index_mapping[torch.cat([empty, *owned, tree.swa_live if tree is not None else empty])]
    live = swa[swa > 0]
    assert live.unique().numel() == live.numel(), "an SWA slot is mapped from two full slots"
    assert alloc.swa_available_size() + live.numel() == alloc.size_swa, "SWA-pool counts do not add up"
    in_use = set(r.req_pool_idx for r in running)
    assert (
        len(in_use) == len(running)
        and runner.req_to_token_pool.available_size() + len(in_use) == runner.req_to_token_pool.size
    )


@pytest.fixture(scope="module", params=["tape", "off"])
def engine(target, request):
    engine = target.make_engine(untied_checkpoint("gemma2"), graphs=request.param, **ENGINE_LIMITS)
    on_every_forward(engine, after=lambda batch, uses_graph, state: audit_ownership(engine))
    return engine


def run(engine: Engine, case: MixedBatch) -> None:
    prompts = [[(11 * i + j) % 127 + 1 for j in range(n)] for i, n in enumerate(case.prompt_lens)]
    with recovering(engine):
        engine.generate(prompts, [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in case.new_tokens])
    assert engine.pools_idle(), "slots are still owned after every request finished"


@pytest.mark.parametrize("case", mixed_batch_cases(WINDOW), ids=lambda c: c.name)
def test_accounting_holds_at_every_step_and_pools_drain(engine, case):
    run(engine, case)


@settings(max_examples=examples(3))
@given(case=mixed_batches(WINDOW))
def test_generated_workloads(engine, case):
    run(engine, case)


def test_a_workload_larger_than_the_pools_drains(target):
    engine = target.make_engine(untied_checkpoint("gemma2"), graphs="tape", full_pool_size=150, **ENGINE_LIMITS)
    on_every_forward(engine, after=lambda batch, uses_graph, state: audit_ownership(engine))
    run(engine, MixedBatch("over-capacity", (30,) * 9, (20,) * 9))
