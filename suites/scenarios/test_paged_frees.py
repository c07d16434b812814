"""A free of part of a page (page size > 1) on any target: the SWA page goes back whole or not at all, and no
token is left mapped into a page that went back (SGLang #27779: ``free_swa`` freed the page and cleared only
the passed tokens' entries, so the page's other tokens read whatever the next owner wrote, then freed it again)."""

from __future__ import annotations

import pytest

from harness.mem.errors import PoolError
from harness.targets.target import PoolSpec


@pytest.mark.parametrize("page_size", [4, 16])
def test_a_partial_page_free_swa_leaves_no_token_mapped_into_a_freed_page(target, page_size):
    handle = target.build_pool(PoolSpec(size=8 * page_size, size_swa=4 * page_size, page_size=page_size))
    allocator = handle.allocator
    mapping = allocator.full_to_swa_index_mapping
    first = allocator.alloc_extend([0], [2 * page_size], [-1]).clone()  # two whole pages of one request
    try:
        allocator.free_swa(first[:1])  # the first token of a page leaves alone: refused, or its page goes
    except PoolError:
        pass  # the harness's contract: whole pages only, nothing changed
    rest = allocator.swa_available_size()  # the next request takes every free SWA page, a freed one included
    other = allocator.alloc_extend([0], [rest], [-1]).clone()
    taken = {int(s) // page_size for s in mapping[other.long()].tolist() if s}
    stale = [
        (int(full), int(swa))
        for full, swa in zip(first.tolist(), mapping[first.long()].tolist())
        if swa // page_size in taken
    ]
    assert not stale, (
        f"tokens of the first request still map to SWA slots {[s for _, s in stale]} on pages another request now "
        f"holds (full slots {[f for f, _ in stale]}): its window reads the other request's K/V"
    )
    live = sorted({int(s) // page_size for s in mapping[first.long()].tolist() if s})
    held = len(live) + len(taken)
    assert allocator.swa_available_size() == (4 - held) * page_size, (
        f"SWA pool: {allocator.swa_available_size()} slots free, {held} pages held by the two requests"
    )
