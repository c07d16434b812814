"""Accounting, layout and bad-input behaviour of the request map, KV pools and allocators."""

from __future__ import annotations

import pytest
import torch

from harness.mem import (
    AlignmentError,
    DoubleFreeError,
    IndexContractError,
    MHATokenToKVPool,
    PaddingSlotError,
    PoolError,
    ReqToTokenPool,
    SWAKVPool,
    TokenToKVPoolAllocator,
)
from tests.mem_helpers import build_swa, idx

# -- ReqToTokenPool ------------------------------------------------------------------------------


def test_req_to_token_alloc_free_and_padding_row():
    pool = ReqToTokenPool(size=3, max_context_len=8)
    assert pool.req_to_token.shape == (4, 8) and pool.req_to_token.dtype == torch.int32
    slots = pool.alloc(3)
    assert slots == [1, 2, 3] and pool.alloc(1) is None and pool.available_size() == 0
    pool.write(2, 0, idx(5, 6, 7))
    assert pool.req_to_token[2, :4].tolist() == [5, 6, 7, 0]
    pool.free(2)
    assert pool.req_to_token[2].sum() == 0 and pool.available_size() == 1
    assert pool.req_to_token[0].sum() == 0  # the padding row is never handed out


@pytest.mark.parametrize(
    "action, error",
    [
        (lambda p: p.free(0), PaddingSlotError),
        (lambda p: p.free(1) or p.free(1), DoubleFreeError),
        (lambda p: p.free([1, 1]), DoubleFreeError),
        (lambda p: p.free(9), IndexContractError),
        (lambda p: p.write(1, 6, idx(1, 2, 3)), IndexContractError),
        (lambda p: p.write(1, 0, torch.tensor([1, 2])), IndexContractError),  # int64
        (lambda p: p.write(2, 0, idx(1)), IndexContractError),  # slot 2 not allocated
        (lambda p: p.alloc(-1), PoolError),
    ],
)
def test_req_to_token_bad_input(action, error):
    pool = ReqToTokenPool(size=2, max_context_len=8)
    pool.alloc(1)
    with pytest.raises(error):
        action(pool)


def test_req_to_token_write_tokens_is_one_write_per_pair_and_read_tokens_reads_ranges_back():
    batched, single = ReqToTokenPool(size=3, max_context_len=8), ReqToTokenPool(size=3, max_context_len=8)
    for pool in (batched, single):
        pool.alloc(3)
    slots, positions, locs = [3, 1, 2], [0, 5, 7], idx(11, 12, 13)
    batched.write_tokens(slots, positions, locs)
    for i, (slot, pos) in enumerate(zip(slots, positions)):
        single.write(slot, pos, locs[i : i + 1])
    assert torch.equal(batched.req_to_token, single.req_to_token)
    batched.write(2, 0, idx(1, 2, 3))
    got = batched.read_tokens([(2, 1, 3), (1, 5, 6), (3, 0, 0)])  # an empty range reads nothing
    assert got.dtype == torch.int32 and got.tolist() == [2, 3, 12]
    for bad in ((2, -1, 1), (2, 7, 9), (2, 3, 2), (4, 0, 1)):  # never another row's or the tensor's end
        with pytest.raises(IndexContractError, match="read_tokens: request slot"):
            batched.read_tokens([(1, 0, 1), bad])


@pytest.mark.parametrize(
    "slots, positions, locs, match",
    [
        ([1, 2], [0, 0], idx(5, 6), "request slot 2 is not allocated"),
        ([1], [8], idx(5), "do not fit in max_context_len=8"),
        ([1], [-1], idx(5), "do not fit"),
        ([1, 1], [0], idx(5, 6), "2 request slots, 1 positions and 2 locs"),
        ([1], [0], torch.tensor([5]), "dtype"),
    ],
)
def test_req_to_token_write_tokens_bad_input_writes_nothing(slots, positions, locs, match):
    pool = ReqToTokenPool(size=2, max_context_len=8)
    pool.alloc(1)
    with pytest.raises(IndexContractError, match=match):
        pool.write_tokens(slots, positions, locs)
    assert pool.req_to_token.sum() == 0


# -- MHATokenToKVPool ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_kv_pool_layout_and_dtype_contract(dtype):
    pool = MHATokenToKVPool(6, dtype=dtype, head_num=2, head_dim=4, layer_num=3)
    assert pool.get_key_buffer(2).shape == (7, 2, 4)
    assert all(b.dtype == dtype for b in (*pool.k_buffer, *pool.v_buffer))
    k = torch.randn(2, 2, 4)
    pool.set_kv_buffer(1, idx(3, 5), k, -k)
    assert torch.equal(pool.get_key_buffer(1)[3], k[0].to(dtype))
    assert torch.equal(pool.get_value_buffer(1)[5], (-k[1]).to(dtype))
    assert pool.get_key_buffer(1)[[0, 1, 2, 4, 6]].abs().sum() == 0


def test_kv_pool_rejects_unsupported_dtype():
    with pytest.raises(PoolError, match="KV dtype"):
        MHATokenToKVPool(4, dtype=torch.int8, head_num=1, head_dim=2, layer_num=1)


@pytest.mark.parametrize(
    "loc, k_rows, error, match",
    [
        (torch.tensor([1, 2]), 2, IndexContractError, "dtype torch.int32"),
        (idx(1, 2).view(1, 2), 2, IndexContractError, "rank 1"),
        (torch.tensor([1, 2], dtype=torch.int32, device="meta"), 2, IndexContractError, "device"),
        ([1, 2], 2, IndexContractError, "torch.Tensor"),
        (idx(1, 2), 3, PoolError, "one row per loc"),
    ],
)
def test_kv_pool_bad_loc(loc, k_rows, error, match):
    pool = MHATokenToKVPool(4, dtype=torch.float32, head_num=1, head_dim=2, layer_num=1)
    k = torch.zeros(k_rows, 1, 2)
    with pytest.raises(error, match=match):
        pool.set_kv_buffer(0, loc, k, k)


def test_kv_pool_bad_layer():
    pool = MHATokenToKVPool(4, dtype=torch.float32, head_num=1, head_dim=2, layer_num=1)
    with pytest.raises(PoolError, match="layer 1"):
        pool.get_key_buffer(1)


# -- TokenToKVPoolAllocator ----------------------------------------------------------------------


def test_allocator_accounting_and_none_when_full():
    alloc = TokenToKVPoolAllocator(4)
    a = alloc.alloc(3)
    assert a.dtype == torch.int32 and sorted(a.tolist()) == [1, 2, 3] and alloc.available_size() == 1
    assert alloc.alloc(2) is None and alloc.available_size() == 1  # nothing changed
    alloc.free(a[:2])
    assert alloc.available_size() == 3
    b = alloc.alloc(3)
    assert sorted(b.tolist()) == [1, 2, 4]
    alloc.clear()
    assert alloc.available_size() == 4


@pytest.mark.parametrize(
    "action, error",
    [
        (lambda a, s: a.free(s[:1]) or a.free(s[:1]), DoubleFreeError),
        (lambda a, s: a.free(idx(s[0].item(), s[0].item())), DoubleFreeError),
        (lambda a, s: a.free(idx(0)), PaddingSlotError),
        (lambda a, s: a.free(idx(99)), IndexContractError),
        (lambda a, s: a.free(idx(-1)), IndexContractError),
        (lambda a, s: a.free(idx(-1, 0)), PaddingSlotError),  # the padding slot is named first, as before
        (lambda a, s: a.free(idx(s[0].item(), 99)), IndexContractError),
        (lambda a, s: a.free(s.long()), IndexContractError),
        (lambda a, s: a.alloc(-2), PoolError),
    ],
)
def test_allocator_bad_input_changes_nothing(action, error):
    alloc = TokenToKVPoolAllocator(8)
    slots = alloc.alloc(3).clone()
    before = alloc.available_size()
    with pytest.raises(error):
        action(alloc, slots)
    if error is DoubleFreeError and before != alloc.available_size():
        # the first free of the double-free case succeeded; the second must not have counted
        assert alloc.available_size() == before + 1
    else:
        assert alloc.available_size() == before


def test_paged_allocator_hands_out_whole_contiguous_pages():
    alloc = TokenToKVPoolAllocator(16, page_size=4)
    slots = alloc.alloc(8)
    assert slots.tolist() == [4, 5, 6, 7, 8, 9, 10, 11]
    with pytest.raises(AlignmentError, match="multiple of page_size"):
        alloc.alloc(3)
    alloc.free(slots[4:6])  # a request's partly used last page is freed with its used slots
    assert alloc.available_size() == 12
    with pytest.raises(DoubleFreeError):
        alloc.free(slots[5:7])
    with pytest.raises(PaddingSlotError):
        alloc.free(idx(0, 1, 2, 3))
    assert alloc.alloc(16) is None


# -- SWAKVPool + SWATokenToKVPoolAllocator -------------------------------------------------------


def test_layers_mapping_and_routing():
    pool, allocator = build_swa(swa_layers=(0, 2, 3), full_layers=(1,))
    assert pool.layers_mapping == {1: (0, False), 0: (0, True), 2: (1, True), 3: (2, True)}
    loc = allocator.alloc(2)
    k = torch.randn(2, 2, 4)
    pool.set_kv_buffer(3, loc, k, k)
    swa = allocator.full_to_swa_index_mapping[loc]
    assert torch.equal(pool.get_key_buffer(3)[swa], k)
    pool.set_kv_buffer(1, loc, -k, -k)
    assert torch.equal(pool.get_key_buffer(1)[loc], -k)
    with pytest.raises(PoolError, match="layer 7"):
        pool.set_kv_buffer(7, loc, k, k)


def test_pool_rejects_a_layer_listed_twice():
    with pytest.raises(PoolError, match="both sliding and full"):
        SWAKVPool(
            4,
            4,
            dtype=torch.float32,
            head_num=1,
            head_dim=2,
            swa_attention_layer_ids=[0, 1],
            full_attention_layer_ids=[1],
        )


def test_mapping_sentinels():
    pool, allocator = build_swa(size=8, size_swa=4)
    mapping = allocator.full_to_swa_index_mapping
    assert mapping.dtype == torch.int32 and mapping.numel() == 8 + 1 + 1 and mapping[-1] == -1
    loc = allocator.alloc(2)
    out = pool.translate_loc_from_full_to_swa(torch.cat([loc, idx(-1, 0)]))
    assert out.dtype == torch.int32
    assert out.tolist() == [*mapping[loc].tolist(), -1, 0]
    assert all(s > 0 for s in mapping[loc].tolist())


def test_free_swa_keeps_full_slot_and_resets_mapping():
    pool, allocator = build_swa(size=8, size_swa=4)
    loc = allocator.alloc(4)
    assert allocator.swa_available_size() == 0 and allocator.alloc(1) is None
    allocator.free_swa(loc[:2])
    assert allocator.full_to_swa_index_mapping[loc[:2]].tolist() == [0, 0]
    assert allocator.swa_available_size() == 2 and allocator.full_available_size() == 4
    with pytest.raises(DoubleFreeError, match="already released"):
        allocator.free_swa(loc[:1])
    allocator.free(loc)  # frees the two full slots without SWA slots and the two with
    assert allocator.full_available_size() == 8 and allocator.swa_available_size() == 4


@pytest.mark.parametrize(
    "action, error",
    [
        (lambda a, s: a.free_swa(idx(5)), PoolError),  # never allocated
        (lambda a, s: a.free_swa(s[:1]) or a.free_swa(s), DoubleFreeError),  # its SWA slot is gone already
        (lambda a, s: a.free_swa(s.long()), IndexContractError),
        (lambda a, s: a.free(idx(0)), PaddingSlotError),
        (lambda a, s: a.free(s) or a.free(s), DoubleFreeError),
        (lambda a, s: a.set_full_to_swa_mapping(s, idx(1)), IndexContractError),
        (lambda a, s: a.set_full_to_swa_mapping(s[:1], idx(99)), IndexContractError),
    ],
)
def test_swa_allocator_bad_input(action, error):
    _, allocator = build_swa(size=8, size_swa=4)
    slots = allocator.alloc(2).clone()
    with pytest.raises(error):
        action(allocator, slots)


def test_swa_free_is_atomic_on_error():
    _, allocator = build_swa(size=8, size_swa=4)
    a = allocator.alloc(2).clone()
    mapping_before = allocator.full_to_swa_index_mapping.clone()
    with pytest.raises(DoubleFreeError):
        allocator.free(torch.cat([a, a[:1]]))
    assert torch.equal(allocator.full_to_swa_index_mapping, mapping_before)
    assert allocator.full_available_size() == 6 and allocator.swa_available_size() == 2


def test_translation_requires_registered_mapping_of_the_right_size():
    pool = SWAKVPool(
        4, 2, dtype=torch.float32, head_num=1, head_dim=2, swa_attention_layer_ids=[0], full_attention_layer_ids=[1]
    )
    with pytest.raises(PoolError, match="no full_to_swa_index_mapping"):
        pool.translate_loc_from_full_to_swa(idx(1))
    with pytest.raises(IndexContractError, match="6 entries"):
        pool.register_mapping(torch.zeros(5, dtype=torch.int32))


def test_pool_and_allocator_sizes_must_agree():
    pool, _ = build_swa(size=8, size_swa=4)
    from harness.mem import SWATokenToKVPoolAllocator

    with pytest.raises(PoolError, match="do not match"):
        SWATokenToKVPoolAllocator(8, 6, pool)


def test_paged_swa_allocation_preserves_offsets_within_a_page():
    pool, allocator = build_swa(size=16, size_swa=8, page_size=4)
    first = allocator.alloc(4)
    loc = allocator.alloc(4)
    swa = allocator.full_to_swa_index_mapping[loc]
    assert (loc % 4).tolist() == (swa % 4).tolist() == [0, 1, 2, 3]
    assert allocator.alloc(4) is None  # SWA pool (8 slots = 2 pages) is exhausted
    with pytest.raises(AlignmentError):
        allocator.alloc(2)
    with pytest.raises(AlignmentError):
        allocator.free_swa(first[:2])
    allocator.free_swa(first)
    assert allocator.swa_available_size() == 4 and allocator.full_available_size() == 8


def test_set_kv_buffer_accepts_a_pretranslated_swa_loc_of_the_pool_dtype_only():
    pool, allocator = build_swa()
    loc = allocator.alloc(2)
    swa = pool.translate_loc_from_full_to_swa(loc)
    k = torch.randn(2, 2, 4)
    pool.set_kv_buffer(0, loc, k, k, swa_loc=swa)
    assert torch.equal(pool.get_key_buffer(0)[swa], k)
    with pytest.raises(IndexContractError, match="swa_loc must have dtype torch.int32"):
        pool.set_kv_buffer(0, loc, k, k, swa_loc=swa.long())


def test_paged_requests_fill_their_last_page_before_taking_a_new_one():
    alloc = TokenToKVPoolAllocator(16, page_size=4)
    first = alloc.alloc_extend([0, 0], [3, 6], [-1, -1])  # two new requests: 1 page and 2 pages
    assert first.tolist() == [4, 5, 6, 8, 9, 10, 11, 12, 13]
    assert alloc.available_size() == 4
    grown = alloc.alloc_extend([3, 6], [4, 7], [6, 13])  # each continues on the page of its last token
    assert grown.tolist() == [7, 14]
    assert alloc.alloc_extend([4], [5], [7]).tolist() == [16]  # a full page: a new one
    assert alloc.alloc_extend([5], [9], [16]) is None and alloc.available_size() == 0  # needs a page: none left
    with pytest.raises(PoolError, match="last slot"):
        alloc.alloc_extend([2], [3], [8])  # token 1 of a request cannot live at offset 0 of a page


def test_paged_swa_requests_page_in_step_and_leave_the_window_by_whole_pages():
    pool, allocator = build_swa(size=32, size_swa=16, page_size=4)
    loc = allocator.alloc_extend([0], [6], [-1])
    swa = allocator.full_to_swa_index_mapping[loc]
    assert (loc % 4).tolist() == (swa % 4).tolist() == [0, 1, 2, 3, 0, 1]
    loc7 = allocator.alloc_decode([7], [int(loc[-1])])
    assert int(loc7) == int(loc[-1]) + 1 and int(allocator.full_to_swa_index_mapping[loc7]) == int(swa[-1]) + 1
    with pytest.raises(AlignmentError, match="whole pages"):
        allocator.free_swa(loc[:2])  # the rest of that page is still in the window
    allocator.free_swa(loc[:4])
    assert allocator.swa_available_size() == 12 and allocator.full_available_size() == 24
    with pytest.raises(PoolError, match="still hold SWA slots"):
        allocator.free_full(loc[4:])
    allocator.free_full(loc[:4])
    allocator.free(torch.cat([loc[4:], loc7]))  # the partly used last page goes with its used slots
    assert (allocator.full_available_size(), allocator.swa_available_size()) == (32, 16)
