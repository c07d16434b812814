"""One group's blocks for connector-loaded tokens evict another group's prefix-cache hit (#33775).

Upstream: when a KV connector supplies tokens past the local prefix-cache hit, each group adopts its hit blocks
(touching them, which takes them off the free queue) and gets new blocks for the external tokens. Done group by group,
the first group's ``get_new_blocks`` could pop a later group's hit block, still an evictable cached block on the free
queue: the block's hash is dropped, the first group writes it, and the later group then adopts the same block as its
cached prefix. Issue #33775; the fix made it two phases: every group touches its hits, then every group allocates.

On 0.32.0 the two phases are ``KVCacheCoordinator.allocate_new_computed_blocks``'s two loops. The edit folds them into
one loop that does both for each group in turn, the order before the fix: the full-attention group (group 0) allocates
its external blocks before the sliding-window group has touched its hit.
"""

from harness.targets.vllm.faults import SourceEdit, VLLMFault

FAULT = VLLMFault(
    id="vllm-connector-alloc-evicts-other-group-hit",
    seed="#33775",
    breaks="KVCacheCoordinator.allocate_new_computed_blocks adopts each group's prefix-cache hit and allocates its "
    "blocks for connector-loaded tokens group by group, so an earlier group's allocation can evict a later group's "
    "not yet touched hit block",
    user_sees="with a KV connector (LMCache, P/D) on a hybrid model, one physical block ends up in two groups' "
    "tables: the full-attention layers overwrite the sliding-window layers' cached KV, and both read each other's",
    invariant="1: a block sits in one group's table only, and its ref count is its holders",
    edits=(
        SourceEdit(
            "vllm.v1.core.kv_cache_coordinator.KVCacheCoordinator.allocate_new_computed_blocks",
            """for i, manager in enumerate(self.single_type_managers):
manager.add_local_computed_blocks(
request_id,
new_computed_blocks[i],
num_local_computed_tokens,
num_external_computed_tokens,
)
if num_external_computed_tokens > 0:
for i, manager in enumerate(self.single_type_managers):
manager.allocate_external_computed_blocks(
request_id,
num_local_computed_tokens,
num_external_computed_tokens,
record_for_zeroing=i not in skip_zeroing_group_ids,
)""",
            """for i, manager in enumerate(self.single_type_managers):  # (before #33775) one group at a time
    manager.add_local_computed_blocks(
        request_id, new_computed_blocks[i], num_local_computed_tokens, num_external_computed_tokens
    )
    if num_external_computed_tokens > 0:
        manager.allocate_external_computed_blocks(
            request_id,
            num_local_computed_tokens,
            num_external_computed_tokens,
            record_for_zeroing=i not in skip_zeroing_group_ids,
        )""",
        ),
    ),
)
