"""Invariant 3 under stale-cache hazards: the SWA slots a translation returns are always the current
mapping of its full slots — across view offsets, mapping mutations, reused buffers and window lookups."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from fixtures.checkpoints import untied_checkpoint
from fixtures.scenarios.stale_cache import (
    MutationBetweenTranslations,
    ViewsAtOffsets,
    mutation_cases,
    mutations,
    reused_buffer_cases,
    views_at_offsets,
    views_cases,
    window_between_writes_cases,
)
from harness.engine import ForwardMode, SamplingParams
from harness.engine.scheduler import ScheduledBatch
from harness.targets.target import PoolSpec
from suites.checks import expect_structure
from suites.conftest import ENGINE_LIMITS
from suites.hooks import recovering


def check_views(target, case: ViewsAtOffsets) -> None:
    handle = target.build_pool(PoolSpec(size=64, size_swa=32))
    loc = handle.allocator.alloc(case.offset + case.length)  # one storage: a view of the free list
    first, second = loc[: case.length], loc[case.offset : case.offset + case.length]
    mapping = handle.allocator.full_to_swa_index_mapping
    handle.pool.invalidate_loc_cache()
    got_first = handle.pool.translate_loc_from_full_to_swa(first).clone()
    got_second = handle.pool.translate_loc_from_full_to_swa(second)  # no flush between: only the key differs
    assert torch.equal(got_first, mapping[first])
    assert torch.equal(got_second, mapping[second]), (
        f"view at offset {case.offset} got {got_second.tolist()}, its mapping is {mapping[second].tolist()}"
    )


@pytest.mark.parametrize("case", views_cases(), ids=lambda c: c.name)
def test_views_at_different_offsets_get_their_own_slots(target, case):
    check_views(target, case)


@settings(max_examples=25)
@given(case=views_at_offsets())
def test_generated_view_offsets(target, case):
    check_views(target, case)


def mutate(handle, mutation: str, probe: torch.Tensor) -> None:
    allocator = handle.allocator
    if mutation == "alloc":
        allocator.alloc(int(probe.max()))  # slots come out 1, 2, ...: the probe becomes mapped
    elif mutation == "free":
        allocator.free(probe)
    elif mutation == "free_swa":
        allocator.free_swa(probe)
    elif mutation == "clear":
        allocator.clear()
    elif mutation == "set_full_to_swa_mapping":
        allocator.set_full_to_swa_mapping(probe, torch.full_like(probe, handle.pool.size_swa))
    elif mutation == "register_mapping":
        allocator.full_to_swa_index_mapping = allocator.full_to_swa_index_mapping.clone()
        allocator.full_to_swa_index_mapping[probe] = 1
        allocator.register_mapping()
    else:
        raise ValueError(f"unknown mutation {mutation}")


def check_mutation(target, case: MutationBetweenTranslations) -> None:
    handle = target.build_pool(PoolSpec(size=64, size_swa=32))
    if case.mutation == "alloc":
        probe = torch.arange(1, case.probe_len + 1, dtype=torch.int32)
    else:
        handle.allocator.alloc(2)  # so the probe's SWA slots are not 1, 2, ...
        probe = handle.allocator.alloc(case.probe_len).clone()
    before = handle.pool.translate_loc_from_full_to_swa(probe).clone()
    mutate(handle, case.mutation, probe)
    after = handle.pool.translate_loc_from_full_to_swa(probe)
    expected = handle.allocator.full_to_swa_index_mapping[probe]
    assert not torch.equal(before, expected), "the mutation did not change the probe's mapping (vacuous case)"
    assert torch.equal(after, expected), (
        f"after {case.mutation}: translation {after.tolist()} but mapping {expected.tolist()}"
    )


@pytest.mark.parametrize("case", mutation_cases(), ids=lambda c: c.name)
def test_translation_after_a_mapping_mutation_sees_the_new_mapping(target, case):
    check_mutation(target, case)


@settings(max_examples=25)
@given(case=mutations())
def test_generated_mutations(target, case):
    check_mutation(target, case)


@pytest.fixture(scope="module")
def engine(target):
    # Decode graphs only: the "eager-then-graph" cases need their extend forward to run eagerly.
    return target.make_engine(untied_checkpoint("gemma2"), graphs="tape", extend_graphs=False, **ENGINE_LIMITS)


@pytest.mark.parametrize("case", reused_buffer_cases(), ids=lambda c: c.name)
def test_a_loc_buffer_refilled_between_forwards_is_translated_afresh(engine, case, stale_key_watch):
    """Two forwards share one loc tensor, refilled in place, with no allocator call in between."""
    with recovering(engine):
        k, sched = case.batch, engine.scheduler
        decoders = [
            engine.add_request([i + 1, i + 2, i + 3], SamplingParams(max_new_tokens=6, ignore_eos=True))
            for i in range(2 * k if case.first_graph else k)
        ]
        while any(not r.prefill_done for r in decoders):
            engine.step()
        if case.first_graph:
            first = ScheduledBatch(ForwardMode.DECODE, reqs=decoders[:k])
        else:
            engine.add_request(list(range(10, 10 + k)), SamplingParams(max_new_tokens=2, ignore_eos=True))
            first = sched.schedule()  # an eager extend of exactly k tokens
        second = ScheduledBatch(ForwardMode.DECODE, reqs=decoders[-k:])
        batches = [sched.build_forward_batch(first), sched.build_forward_batch(second)]  # all allocation done
        static_loc = batches[0].out_cache_loc.clone()
        mapping = engine.runner.allocator.full_to_swa_index_mapping
        for batch in batches:
            static_loc.copy_(batch.out_cache_loc)
            batch.out_cache_loc = static_loc
            engine.runner.forward(batch)
            assert torch.equal(batch.out_cache_loc_swa, mapping[static_loc]), (
                f"{batch.forward_mode.value} forward wrote SWA slots {batch.out_cache_loc_swa.tolist()}, "
                f"current mapping is {mapping[static_loc].tolist()}"
            )
        expect_structure(not stale_key_watch.messages, stale_key_watch.messages[0] if stale_key_watch.messages else "")
        engine.abort_all()
        assert engine.pools_idle()


@pytest.mark.parametrize("case", window_between_writes_cases(), ids=lambda c: c.name)
def test_window_lookup_between_two_writes_leaves_the_write_loc_clean(target, case, stale_key_watch):
    handle = target.build_pool(PoolSpec(size=64, size_swa=32))
    loc = handle.allocator.alloc(case.batch).clone()
    window = handle.allocator.alloc(case.window_len).clone()
    mapping = handle.allocator.full_to_swa_index_mapping
    k1, k2 = torch.randn(2, case.batch, 2, 8)
    handle.pool.invalidate_loc_cache()
    handle.pool.set_kv_buffer(0, loc, k1, k1)
    assert torch.equal(handle.pool.translate_fresh_loc(window), mapping[window])
    handle.pool.set_kv_buffer(2, loc, k2, k2)
    assert torch.equal(handle.pool.get_key_buffer(2)[mapping[loc]], k2)
    expect_structure(not stale_key_watch.messages, stale_key_watch.messages[0] if stale_key_watch.messages else "")
