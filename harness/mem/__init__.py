"""The memory subsystem under test: request map, KV pools and allocators (names follow SGLang's)."""

from harness.mem.allocator import TokenToKVPoolAllocator
from harness.mem.build import HybridPool, HybridPoolSpec, PoolBuilder, build_hybrid_pool
from harness.mem.contracts import KVAllocator, KVBuffers, KVPool, SlotOwnership
from harness.mem.errors import (
    AlignmentError,
    DoubleFreeError,
    IndexContractError,
    PaddingSlotError,
    PoolError,
)
from harness.mem.index import LOC_DTYPE, PADDING_SLOT
from harness.mem.kv_pool import KV_DTYPES, MHATokenToKVPool
from harness.mem.req_to_token_pool import ReqToTokenPool
from harness.mem.swa_allocator import SWATokenToKVPoolAllocator
from harness.mem.loc_memo import STALE_KEY_WARNING, SwaLocMemo
from harness.mem.swa_kv_pool import SWAKVPool

__all__ = [
    "AlignmentError",
    "DoubleFreeError",
    "HybridPool",
    "HybridPoolSpec",
    "IndexContractError",
    "KVAllocator",
    "KVBuffers",
    "KVPool",
    "KV_DTYPES",
    "LOC_DTYPE",
    "MHATokenToKVPool",
    "PADDING_SLOT",
    "PaddingSlotError",
    "PoolBuilder",
    "PoolError",
    "ReqToTokenPool",
    "STALE_KEY_WARNING",
    "SWAKVPool",
    "SWATokenToKVPoolAllocator",
    "SlotOwnership",
    "SwaLocMemo",
    "TokenToKVPoolAllocator",
    "build_hybrid_pool",
]
