"""A hybrid ``KVCacheManager`` of vLLM as its engine core builds one for a Gemma-like model (one full-attention group,
one sliding-window group, one shared block pool), for the suites that drive it without a model.

Imported only where vLLM is installed (the suites here skip first otherwise)."""

from __future__ import annotations

from typing import Any, Literal

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
    other_windows: tuple[int, ...] = (),
    drafter: Literal["same spec", "own spec"] | None = None,
    enable_caching: bool = True,
    sliding_dtype: torch.dtype = torch.float32,
    metrics_collector: Any = None,
    dcp_world_size: int = 1,
    num_prefill_lookahead: int = 0,
    log_stats: bool = False,
) -> tuple[Any, Any]:
    """A ``KVCacheManager`` over one full-attention group of ``full_block`` and one sliding group of
    ``sliding_block``, as the engine core builds it for such a model: scheduled in the LCM of the block sizes
    (its cache-hit alignment), hashed in the smaller one, the given prefix-cache retention (None: a tail at every
    aligned boundary; 0: only the replay boundary, the engine's default), publishing its KV-cache events if asked;
    and its request block hasher. ``sliding_groups`` > 1 is Gemma3's layout: vLLM splits the sliding layers into
    groups of the full layers' size, ids ``SLIDING ..`` in order, which share one lookup (a hit needs a block in each).
    ``other_windows`` adds a sliding group of each other window after them (a model whose sliding layers differ in
    window): each is a lookup of its own, so vLLM's hybrid lookup takes more than one pass to agree on a hit.
    ``drafter`` adds an EAGLE drafter's own full-attention group last (``is_eagle_group``), of the target's
    full-attention spec (vLLM looks the two up as one group, which drops EAGLE's block) or of its own (head size 16:
    a lookup of its own, the only one that drops).
    The rest are the engine's other knobs, at its defaults unless asked: prefix caching, the sliding layers' dtype
    (another than the full layers' float32 makes the cache mixed-precision, whose new blocks vLLM zeroes), a
    residency metrics collector, the DCP world size, the prefill lookahead (the engine passes 1 with EAGLE), and the
    prefix-cache stats a server's scheduler takes every step (``log_stats``: on unless ``--disable-log-stats``)."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    init = KVCacheManager.__init__
    if not (takes(init, "scheduler_block_size") and takes(init, "hash_block_size")):
        raise lacks("KVCacheManager(scheduler_block_size=, hash_block_size=) (groups of different block sizes)")
    layer = dict(num_kv_heads=1, head_size=8)
    groups = [
        adapters.group_spec(
            ["model.layers.0.self_attn"],
            adapters.attention_spec(FullAttentionSpec, block_size=full_block, dtype=torch.float32, **layer),
        ),
        *(
            adapters.group_spec(
                [f"model.layers.{1 + g}.self_attn"],
                adapters.attention_spec(
                    SlidingWindowSpec, block_size=sliding_block, sliding_window=window, dtype=sliding_dtype, **layer
                ),
            )
            for g in range(sliding_groups)
        ),
        *(
            adapters.group_spec(
                [f"model.layers.{1 + sliding_groups + k}.self_attn"],
                adapters.attention_spec(
                    SlidingWindowSpec, block_size=sliding_block, sliding_window=w, dtype=sliding_dtype, **layer
                ),
            )
            for k, w in enumerate(other_windows)
        ),
    ]
    if drafter is not None:
        head = layer["head_size"] * (1 if drafter == "same spec" else 2)  # the target's full-attention spec, or not
        spec = adapters.attention_spec(
            FullAttentionSpec, block_size=full_block, dtype=torch.float32, **{**layer, "head_size": head}
        )
        groups.append(adapters.group_spec(["drafter.layers.0.self_attn"], spec, eagle=True))
    return _manager(
        groups,
        num_blocks=num_blocks,
        scheduler_block=max(full_block, sliding_block),
        hash_block=min(full_block, sliding_block),
        retention=retention,
        enable_caching=enable_caching,
        use_eagle=eagle,
        enable_kv_cache_events=events,
        metrics_collector=metrics_collector,
        dcp_world_size=dcp_world_size,
        num_prefill_lookahead=num_prefill_lookahead,
        log_stats=log_stats,
    )


def _manager(
    groups: list[Any], *, num_blocks: int, scheduler_block: int, hash_block: int, retention: int | None, **options: Any
) -> tuple[Any, Any]:
    """The ``KVCacheManager`` over these KV-cache groups, scheduled in ``scheduler_block`` and hashed in ``hash_block``
    with this prefix-cache retention, the engine's other knobs in ``options``; and its request block hasher."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    config = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups)
    if not hasattr(config, "prefix_cache_retention_interval"):
        raise lacks("KVCacheConfig.prefix_cache_retention_interval")
    config.hash_block_size, config.prefix_cache_retention_interval = hash_block, retention
    manager = KVCacheManager(
        config,
        max_model_len=MAX_MODEL_LEN,
        scheduler_block_size=scheduler_block,
        hash_block_size=hash_block,
        **options,
    )
    return manager, get_request_block_hasher(hash_block, sha256)


def full_attention_manager(
    block: int, *, eagle: bool, retention: int | None = None, num_blocks: int = 256, events: bool = False
) -> tuple[Any, Any]:
    """A ``KVCacheManager`` over one full-attention group of ``block`` (a model without sliding layers: vLLM gives it
    the unitary coordinator), scheduled and hashed in that block, and its request block hasher."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    if not (
        takes(KVCacheManager.__init__, "scheduler_block_size") and takes(KVCacheManager.__init__, "hash_block_size")
    ):
        raise lacks("KVCacheManager(scheduler_block_size=, hash_block_size=)")
    spec = adapters.attention_spec(
        FullAttentionSpec, block_size=block, num_kv_heads=1, head_size=8, dtype=torch.float32
    )
    return _manager(
        [adapters.group_spec(["model.layers.0.self_attn"], spec)],
        num_blocks=num_blocks,
        scheduler_block=block,
        hash_block=block,
        retention=retention,
        enable_caching=True,
        use_eagle=eagle,
        enable_kv_cache_events=events,
    )


def mamba_align_manager(block: int, hash_block: int, *, num_blocks: int = 128) -> tuple[Any, Any]:
    """A ``KVCacheManager`` over one full-attention group and one Mamba group in 'align' mode, both of ``block`` (vLLM
    pads attention blocks to the Mamba page), hashed in ``hash_block`` < ``block``: the layout for which vLLM enables
    fine-grained (partial) prefix-cache hits at hash-block boundaries inside a block. Group ids ``FULL`` and
    ``SLIDING`` (the Mamba group sits where the sliding one does in ``hybrid_manager``)."""
    from vllm.v1.kv_cache_interface import MambaSpec

    if not takes(MambaSpec, "mamba_cache_mode"):
        raise lacks("MambaSpec(mamba_cache_mode='align')")
    groups = [
        adapters.group_spec(
            ["model.layers.0.self_attn"],
            adapters.attention_spec(
                FullAttentionSpec, block_size=block, num_kv_heads=1, head_size=8, dtype=torch.float32
            ),
        ),
        adapters.group_spec(
            ["model.layers.1.mixer"],
            MambaSpec(block_size=block, shapes=((8,),), dtypes=(torch.float32,), mamba_cache_mode="align"),
        ),
    ]
    return _manager(
        groups,
        num_blocks=num_blocks,
        scheduler_block=block,
        hash_block=hash_block,
        retention=None,
        enable_caching=True,
        use_eagle=False,
    )
