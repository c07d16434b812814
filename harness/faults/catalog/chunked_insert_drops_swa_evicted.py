"""#29350 / #36909: a chunked (unfinished) insert forgets the request's ``swa_evicted``, so tokens whose SWA
slots the window already gave back enter the tree as live SWA KV."""

from __future__ import annotations

from harness.faults.base import Fault, Patch
from harness.mem.contracts import CacheRequest
from harness.mem.radix_cache import InsertResult, RadixCache, page_floor


def _insert_request(self: RadixCache, req: CacheRequest, *, finished: bool) -> InsertResult:
    """Twin of ``RadixCache._insert_request``: only a finished request's insert carries ``swa_evicted``."""
    end = page_floor(req.kv_len, self.page_size)
    values = self.req_to_token_pool.req_to_token[req.req_pool_idx, :end].clone()
    return self.insert(
        req.fill_ids[:end],
        values,
        prev_prefix_len=req.cache_protected_len,
        swa_evicted_seqlen=req.swa_evicted if finished else 0,
    )


FAULT = Fault(
    id="chunked-insert-drops-swa-evicted",
    seed="#29350 / #36909",
    breaks="cache_unfinished_req inserts a prefill chunk's KV with swa_evicted = 0: the tokens that left the "
    "window during a long prefill become live SWA nodes although their SWA slots are free (mapping 0)",
    user_sees="a later request sharing that prefix matches into the freed span and attends over SWA slots now "
    "owned by nobody or by another request: outputs change with the radix cache on; the SWA pool's evictable "
    "count overstates what it can free",
    invariant="windows: a match ends only where its last window - 1 tokens hold live SWA KV",
    patches=(Patch(RadixCache, "_insert_request", _insert_request),),
)
