"""A request retracted to host memory and brought back, through SGLang's ``SWAKVPool.get_cpu_copy`` and
``load_cpu_copy``, as its scheduler does it (``offload_kv_cache`` / ``load_kv_cache``).

The request holds K/V in every layer; its oldest pages have left the window (no SWA slots). It is copied
to the host and freed; other requests take its slots and write there. It comes back with new slots:
SWA slots for every token (a plain re-admission) or for its window's pages only (a decode server's tail
allocation), and its copy is loaded. Behaviour: every full-attention token's K/V is back, every token
that held an SWA slot at both ends has its sliding-layer K/V back, and no other request's K/V changed.
The sub-pools' host chunk size is drawn small as well, so the SWA rows are filtered across chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.targets.target import PoolSpec

SWA_LAYERS, FULL_LAYERS = (0, 2), (1, 3)
HEADS, DIM = 2, 8


@pytest.fixture(scope="module")
def sglang_target(target):
    if target.name != "sglang":
        pytest.skip("drives SGLang's SWAKVPool host copies: run with --target sglang (nox -s sglang)")
    return target


@dataclass(frozen=True)
class Retraction:
    page_size: int
    tokens: int
    evicted_pages: int  # pages that left the window before the retraction
    tail_pages: int | None  # re-admitted with SWA slots for this many last pages only (None: for every token)
    chunk: int  # the sub-pools' cpu_offloading_chunk_size


@st.composite
def retractions(draw) -> Retraction:
    ps = draw(st.sampled_from([1, 4]))
    tokens = draw(st.integers(2, 24))
    last_page = (tokens - 1) // ps  # the page of the last token never leaves the window
    evicted = draw(st.integers(0, last_page))
    tail = draw(st.none() | st.integers(1, last_page + 1)) if ps > 1 else None
    return Retraction(ps, tokens, evicted, tail, draw(st.sampled_from([3, 5, 8192])))


def kv(value: float, n: int) -> torch.Tensor:
    return torch.full((n, HEADS, DIM), value)


def values(layer: int, n: int) -> torch.Tensor:
    """Token i's K/V in ``layer``: distinct per token and layer."""
    return (
        (100.0 * (layer + 1) + torch.arange(n, dtype=torch.float32))[:, None, None].expand(n, HEADS, DIM).contiguous()
    )


def check_retraction(target, r: Retraction) -> None:
    ps, n = r.page_size, r.tokens
    handle = target.build_pool(
        PoolSpec(
            size=64 * ps,
            size_swa=32 * ps,
            page_size=ps,
            head_num=HEADS,
            head_dim=DIM,
            swa_layers=SWA_LAYERS,
            full_layers=FULL_LAYERS,
        )
    )
    pool, allocator = handle.pool, handle.allocator
    for sub in (pool.sglang.full_kv_pool, pool.sglang.swa_kv_pool):
        sub.cpu_offloading_chunk_size = r.chunk
    mapping = allocator.full_to_swa_index_mapping

    def write(loc: torch.Tensor, per_layer) -> None:
        for layer in SWA_LAYERS + FULL_LAYERS:
            k = per_layer(layer, loc.numel())
            pool.set_kv_buffer(layer, loc, k, k)

    bystander = allocator.alloc_extend([0], [3], [-1])
    write(bystander, lambda layer, m: kv(-1.0, m))
    old = allocator.alloc_extend([0], [n], [-1])
    write(old, values)
    evicted = r.evicted_pages * ps
    if evicted:
        allocator.free_swa(old[:evicted])
        left = mapping[old[:evicted].long()]
        assert not left.any(), f"tokens that left the window still map to SWA slots {left.tolist()[:8]}"
    host = allocator.sglang.get_cpu_copy(old.long())  # offload_kv_cache
    allocator.free(old)
    squatter = allocator.alloc_extend([0], [n], [-1])  # other requests take the freed slots and write there
    write(squatter, lambda layer, m: kv(-7.0, m))
    allocator.free(squatter)
    if r.tail_pages is None:
        new = allocator.alloc_extend([0], [n], [-1])
    else:
        tail = n - max(0, (n - 1) // ps + 1 - r.tail_pages) * ps
        new = allocator.alloc_extend_swa_tail(0, n, -1, tail)
    before = {layer: pool.get_key_buffer(layer).clone() for layer in SWA_LAYERS + FULL_LAYERS}
    allocator.sglang.load_cpu_copy(host, new.long())  # load_kv_cache

    new_swa = mapping[new.long()]
    both = [i for i in range(n) if i >= evicted and int(new_swa[i]) > 0]
    for layer in SWA_LAYERS + FULL_LAYERS:
        keys = pool.get_key_buffer(layer)
        want = values(layer, n)
        if layer in FULL_LAYERS:
            lost = [i for i in range(n) if not torch.equal(keys[new[i]], want[i])]
            assert not lost, f"layer {layer}: tokens {lost} did not get their K/V back (page {ps}, {r})"
            own = set(new.tolist())
        else:
            lost = [i for i in both if not torch.equal(keys[new_swa[i]], want[i])]
            assert not lost, (
                f"sliding layer {layer}: tokens {lost} held SWA slots before and after but did not "
                f"get their K/V back ({r})"
            )
            own = set(new_swa[new_swa > 0].tolist())
        changed = set((keys != before[layer]).flatten(1).any(1).nonzero().flatten().tolist())
        stray = sorted(changed - own)
        assert not stray, f"layer {layer}: loading the copy wrote slots {stray} the request does not hold ({r})"
        live = bystander if layer in FULL_LAYERS else mapping[bystander.long()]
        assert bool((keys[live] == -1.0).all()), f"layer {layer}: another request's K/V changed ({r})"


@settings(max_examples=60, deadline=None)
@given(r=retractions())
def test_a_retracted_request_gets_its_kv_back(sglang_target, r):
    check_retraction(sglang_target, r)


@pytest.mark.parametrize("tail_pages", [None, 1, 2])
def test_a_retraction_after_the_window_moved_across_host_chunks(sglang_target, tail_pages):
    """Pages 0-2 left the window, the copy is chunked by 5 rows and the request comes back with SWA slots for
    every token, its last page or its last two: the SWA rows are filtered across chunk boundaries."""
    check_retraction(sglang_target, Retraction(page_size=4, tokens=23, evicted_pages=3, tail_pages=tail_pages, chunk=5))


def test_a_request_wholly_outside_its_window_comes_back_with_its_full_attention_kv(sglang_target):
    """Every page of the request left the window (a cached prefix whose window state was dropped): its host copy
    holds no SWA rows, and loading it restores the full-attention K/V and writes no SWA slot."""
    ps, n = 4, 12
    handle = sglang_target.build_pool(
        PoolSpec(
            size=64,
            size_swa=32,
            page_size=ps,
            head_num=HEADS,
            head_dim=DIM,
            swa_layers=SWA_LAYERS,
            full_layers=FULL_LAYERS,
        )
    )
    pool, allocator = handle.pool, handle.allocator
    old = allocator.alloc_extend([0], [n], [-1])
    for layer in SWA_LAYERS + FULL_LAYERS:
        k = values(layer, n)
        pool.set_kv_buffer(layer, old, k, k)
    allocator.free_swa(old)
    host = allocator.sglang.get_cpu_copy(old.long())
    assert host["swa"] is None and not bool(host["swa_mask"].any()), "a copy of unwindowed tokens carries SWA rows"
    allocator.free_full(old)
    new = allocator.alloc_extend([0], [n], [-1])
    before = {layer: pool.get_key_buffer(layer).clone() for layer in SWA_LAYERS}
    allocator.sglang.load_cpu_copy(host, new.long())
    for layer in FULL_LAYERS:
        assert torch.equal(pool.get_key_buffer(layer)[new], values(layer, n)), f"layer {layer}: K/V not restored"
    for layer in SWA_LAYERS:
        assert torch.equal(pool.get_key_buffer(layer), before[layer]), f"sliding layer {layer}: a slot was written"
