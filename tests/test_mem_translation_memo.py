"""The full->SWA translation memo: cache keys, invalidation points, the stale-key warning, op counts."""

from __future__ import annotations

import logging

import pytest
import torch

from harness.mem import STALE_KEY_WARNING
from harness.opcount import OpCounter
from tests.mem_helpers import build_swa, idx


def test_same_offset_views_hit_the_memo():
    pool, allocator = build_swa()
    loc = allocator.alloc(4)
    view_a, view_b = loc[:4], loc[:4]
    assert view_a is not view_b and view_a.data_ptr() == view_b.data_ptr()
    assert pool.translate_loc_from_full_to_swa(view_a) is pool.translate_loc_from_full_to_swa(view_b)


def test_views_at_different_offsets_miss_the_memo():
    pool, allocator = build_swa()
    loc = allocator.alloc(10)
    lo, hi = loc[0:5], loc[5:10]
    assert lo.untyped_storage().data_ptr() == hi.untyped_storage().data_ptr()
    swa_lo = pool.translate_loc_from_full_to_swa(lo)
    swa_hi = pool.translate_loc_from_full_to_swa(hi)  # no invalidation: only the key tells them apart
    assert swa_lo is not swa_hi
    assert swa_hi.tolist() == allocator.full_to_swa_index_mapping[hi].tolist() != swa_lo.tolist()


def test_a_storage_pointer_key_would_collide():
    """Why the key is data_ptr(): overlapping views of one storage share untyped_storage().data_ptr()."""
    t = torch.arange(20, dtype=torch.int32)
    a, b = t[0:10], t[5:15]
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert (a.untyped_storage().data_ptr(), a.numel()) == (b.untyped_storage().data_ptr(), b.numel())
    assert a.data_ptr() != b.data_ptr()


def test_successive_allocations_are_views_of_one_storage():
    """The allocator returns views of its free list, so the offset-blind key is a live hazard, not a toy."""
    _, allocator = build_swa()
    a, b = allocator.alloc(3), allocator.alloc(3)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert a.data_ptr() != b.data_ptr()


def _mutations():
    """Each mutation point, as (name, setup, mutate) where mutate changes the mapping of ``probe``."""

    def alloc(allocator, probe):
        allocator.alloc(int(probe.max()))  # slots are handed out 1, 2, ... so the probe becomes mapped

    def free(allocator, probe):
        allocator.free(probe)

    def free_swa(allocator, probe):
        allocator.free_swa(probe)

    def clear(allocator, probe):
        allocator.clear()

    def set_mapping(allocator, probe):
        allocator.set_full_to_swa_mapping(probe, torch.full_like(probe, 7))

    def register(allocator, probe):
        allocator.full_to_swa_index_mapping = allocator.full_to_swa_index_mapping.clone()
        allocator.full_to_swa_index_mapping[probe] = 5
        allocator.register_mapping()

    return [
        ("alloc", False, alloc),
        ("free", True, free),
        ("free_swa", True, free_swa),
        ("clear", True, clear),
        ("set_full_to_swa_mapping", True, set_mapping),
        ("register_mapping", True, register),
    ]


@pytest.mark.parametrize("name, preallocate, mutate", _mutations(), ids=[m[0] for m in _mutations()])
def test_every_mapping_mutation_invalidates_the_memo(name, preallocate, mutate, caplog):
    pool, allocator = build_swa(size=16, size_swa=8)
    probe = allocator.alloc(3).clone() if preallocate else idx(1, 2, 3)
    before = pool.translate_loc_from_full_to_swa(probe).clone()
    with caplog.at_level(logging.WARNING):
        mutate(allocator, probe)
        after = pool.translate_loc_from_full_to_swa(probe)
    expected = allocator.full_to_swa_index_mapping[probe]
    assert not torch.equal(before, expected), f"{name} did not change the probe's mapping; test is vacuous"
    assert torch.equal(after, expected), f"{name} left a stale translation in the memo"
    assert STALE_KEY_WARNING not in caplog.text


def test_new_key_without_invalidation_warns_and_invalidation_silences(caplog):
    pool, allocator = build_swa()
    a, b = allocator.alloc(2).clone(), allocator.alloc(2).clone()
    with caplog.at_level(logging.WARNING):
        pool.translate_loc_from_full_to_swa(a)
        pool.translate_loc_from_full_to_swa(a)
        assert STALE_KEY_WARNING not in caplog.text
        pool.translate_loc_from_full_to_swa(b)
        assert STALE_KEY_WARNING in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        pool.invalidate_loc_cache()
        pool.translate_loc_from_full_to_swa(a)
    assert STALE_KEY_WARNING not in caplog.text


@pytest.mark.parametrize("num_swa_layers", [1, 2, 5])
def test_one_mapping_gather_per_forward_whatever_the_number_of_swa_layers(num_swa_layers):
    swa_layers = tuple(range(num_swa_layers))
    pool, allocator = build_swa(swa_layers=swa_layers, full_layers=(num_swa_layers,))
    loc = allocator.alloc(3)
    k = torch.randn(3, 2, 4)
    pool.invalidate_loc_cache()  # forward start
    with OpCounter(reads={"mapping": allocator.full_to_swa_index_mapping}) as ops:
        for layer_id in range(num_swa_layers + 1):
            pool.set_kv_buffer(layer_id, loc, k, k)
    assert ops.reads["mapping"] == 1
    assert ops.counts["aten.index_put_"] == 2 * (num_swa_layers + 1)


def test_op_counter_counts_reads_of_views_of_a_watched_tensor():
    base = torch.arange(10, dtype=torch.int32)
    with OpCounter(reads={"base": base}) as ops:
        _ = base[2:5] + 1
        _ = torch.ones(3) * 2
    assert ops.reads["base"] == 1 and ops.counts["aten.add"] == 1 and ops.counts["aten.mul"] == 1
