"""Only the first full-attention group is cut back to the reconciled prefix-cache hit (#52828).

Upstream: the hybrid coordinator finds a hit per attention group and shrinks the candidate length until every group
agrees (a sliding-window group may have lost its window's blocks at a length where full attention still hits; EAGLE
drops a block). Full-attention groups are looked up once, so their hit blocks must be cut back to the final length
afterwards. That cleanup cut ``attention_groups[0]`` only: a second full-attention group (the EAGLE/MTP drafter's own
layers, or DeepSeek-V4's second compressed group) kept blocks past the agreed hit. #52828 truncates every
full-attention group, target and draft.

On 0.32.0 the cleanup is the loop over ``self.attention_groups`` at the end of
``HybridKVCacheCoordinator.find_longest_cache_hit``. The edit loops over ``self.attention_groups[:1]``, the code before
#52828: with a drafter's full-attention group next to the target's and a sliding-window group, the drafter's group
adopts hit blocks beyond the tokens the request actually starts from.
"""

from harness.targets.vllm.faults import SourceEdit, VLLMFault

FAULT = VLLMFault(
    id="vllm-hybrid-hit-draft-group-not-truncated",
    seed="#52828",
    breaks="HybridKVCacheCoordinator.find_longest_cache_hit truncates only the first full-attention group to the "
    "reconciled hit length; the drafter's full-attention group keeps the blocks of its own, longer hit",
    user_sees="with a speculative drafter on a hybrid model, a prefix-cache hit gives the drafter's layers blocks "
    "beyond the computed prefix: they hold another request's KV where this request writes its own, the block "
    "counts drift, and hits collapse (the reported cache_hit_length=0) or the free queue breaks",
    invariant="4: a running request's full-attention tables (target and draft) hold exactly its computed tokens",
    edits=(
        SourceEdit(
            "vllm.v1.core.kv_cache_coordinator.HybridKVCacheCoordinator.find_longest_cache_hit",
            "for group in self.attention_groups:",
            "for group in self.attention_groups[:1]:  # (before #52828) the first full-attention group only",
        ),
    ),
)
