"""A hybrid ``KVCacheManager`` of vLLM as its engine core builds one for a Gemma-like model (one full-attention group,
one sliding-window group, one shared block pool), for the suites that drive it without a model.

Imported only where vLLM is installed (the suites here skip first otherwise)."""

from __future__ import annotations

from typing import Any

import torch
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, SlidingWindowSpec

from harness.targets.vllm import adapters
from harness.targets.vllm.capabilities import lacks, takes

FULL, SLIDING = 0, 1  # the groups' ids, in the order the engine core lists them (full attention first)
MAX_MODEL_LEN = 512  # never reached: the suites' prompts and decodes stay under 260 tokens

sha256 = adapters.sha256_hash()
init_none_hash(sha256)  # once for every vLLM suite: the hash of a request's first block depends on it


def hybrid_manager(
    full_block: int,
    sliding_block: int,
    window: int,
    *,
    eagle: bool,
    retention: int | None,
    num_blocks: int = 256,
    events: bool = False,
    sliding_groups: int = 1,
) -> tuple[Any, Any]:
    """A ``KVCacheManager`` over one full-attention group of ``full_block`` and one sliding group of
    ``sliding_block``, as the engine core builds it for such a model: scheduled in the LCM of the block sizes
    (its cache-hit alignment), hashed in the smaller one, the given prefix-cache retention (None: a tail at every
    aligned boundary; 0: only the replay boundary, the engine's default), publishing its KV-cache events if asked;
    and its request block hasher. ``sliding_groups`` > 1 is Gemma3's layout: vLLM splits the sliding layers into
    groups of the full layers' size, ids ``SLIDING ..`` in order, which share one lookup (a hit needs a block in each)."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    init = KVCacheManager.__init__
    if not (takes(init, "scheduler_block_size") and takes(init, "hash_block_size")):
        raise lacks("KVCacheManager(scheduler_block_size=, hash_block_size=) (groups of different block sizes)")
    layer = dict(num_kv_heads=1, head_size=8, dtype=torch.float32)
    groups = [
        adapters.group_spec(
            ["model.layers.0.self_attn"], adapters.attention_spec(FullAttentionSpec, block_size=full_block, **layer)
        ),
        *(
            adapters.group_spec(
                [f"model.layers.{1 + g}.self_attn"],
                adapters.attention_spec(SlidingWindowSpec, block_size=sliding_block, sliding_window=window, **layer),
            )
            for g in range(sliding_groups)
        ),
    ]
    config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups)
    if not hasattr(config, "prefix_cache_retention_interval"):
        raise lacks("KVCacheConfig.prefix_cache_retention_interval")
    hash_block = min(full_block, sliding_block)
    config.hash_block_size, config.prefix_cache_retention_interval = hash_block, retention
    manager = KVCacheManager(
        config,
        max_model_len=MAX_MODEL_LEN,
        scheduler_block_size=max(full_block, sliding_block),
        hash_block_size=hash_block,
        enable_caching=True,
        use_eagle=eagle,
        enable_kv_cache_events=events,
    )
    return manager, get_request_block_hasher(hash_block, sha256)
