"""Both memory implementations meet the contract the harness uses (``harness.mem.contracts``): the
harness's own pool and allocator, and the adapters over real SGLang (fully where SGLang is installed;
their method signatures always, since the adapter module imports SGLang only when built)."""

from __future__ import annotations

import inspect

import pytest

from harness.engine.request import Req, SamplingParams
from harness.mem import HybridPool, HybridPoolSpec, KVAllocator, KVBuffers, KVPool, SlotOwnership, build_hybrid_pool
from harness.mem.contracts import CacheRequest, PrefixCache
from harness.mem.radix_cache import RadixCache
from harness.targets.target import HarnessTarget
from harness.targets.sglang.adapters import SGLangAllocatorAdapter, SGLangPoolAdapter

PROTOCOLS = (KVPool, KVAllocator, PrefixCache)


def methods(protocol: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(value)
        for name, value in vars(protocol).items()
        if inspect.isfunction(value) and not name.startswith("_")
    }


def attributes(protocol: type) -> list[str]:
    properties = [name for name, value in vars(protocol).items() if isinstance(value, property)]
    return [*protocol.__annotations__, *properties]


def accepts_every_call_of(impl: inspect.Signature, contract: inspect.Signature) -> bool:
    """``impl`` binds the calls ``contract`` allows: all its parameters, and only the required ones
    (positional parameters by position, keyword-only ones by name)."""

    def call(params: list[inspect.Parameter]) -> bool:
        args = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        kwargs = {p.name: p.name for p in params if p.kind == p.KEYWORD_ONLY}
        try:
            impl.bind(*args, **kwargs)
        except TypeError:
            return False
        return True

    params = list(contract.parameters.values())
    return call(params) and call([p for p in params if p.default is p.empty])


def check_methods(cls: type, protocol: type) -> None:
    for name, contract in methods(protocol).items():
        impl = getattr(cls, name, None)
        assert callable(impl), f"{cls.__name__} has no method {name} ({protocol.__name__})"
        assert accepts_every_call_of(inspect.signature(impl), contract), (
            f"{cls.__name__}.{name}{inspect.signature(impl)} does not accept {protocol.__name__}.{name}{contract}"
        )


def check_memory(memory: HybridPool) -> None:
    assert isinstance(memory.pool, KVPool) and isinstance(memory.allocator, KVAllocator)
    for sub_pool in (memory.pool.full_kv_pool, memory.pool.swa_kv_pool):
        assert isinstance(sub_pool, KVBuffers)
    assert isinstance(memory.allocator.full_attn_allocator, SlotOwnership)
    check_methods(type(memory.pool), KVPool)
    check_methods(type(memory.allocator), KVAllocator)
    check_methods(type(memory.allocator.full_attn_allocator), SlotOwnership)


def test_the_contracts_name_members():
    for protocol in PROTOCOLS:
        assert methods(protocol) and attributes(protocol), protocol.__name__


def test_the_harness_pool_and_allocator_meet_the_contracts():
    memory = build_hybrid_pool(HybridPoolSpec())
    check_memory(memory)
    for protocol, obj in ((KVPool, memory.pool), (KVAllocator, memory.allocator)):
        missing = [name for name in attributes(protocol) if not hasattr(obj, name)]
        assert not missing, f"{type(obj).__name__} lacks {missing}"


def test_a_pool_without_a_contract_member_is_refused():
    memory = build_hybrid_pool(HybridPoolSpec())
    del memory.pool.layers_mapping  # an instance attribute: the runtime check sees it gone
    assert not isinstance(memory.pool, KVPool)


@pytest.mark.parametrize(("cls", "protocol"), [(SGLangPoolAdapter, KVPool), (SGLangAllocatorAdapter, KVAllocator)])
def test_the_sglang_adapters_methods_meet_the_contracts(cls: type, protocol: type):
    check_methods(cls, protocol)


def test_the_sglang_adapters_meet_the_contracts():
    from harness.targets.sglang.imports import SGLangUnavailable

    try:
        from harness.targets.sglang import SGLangTarget

        target = SGLangTarget()
    except SGLangUnavailable as unavailable:
        pytest.skip(f"SGLang is not importable here: {unavailable}")
    check_memory(target.build_pool(HybridPoolSpec()))


def test_the_harness_prefix_cache_meets_the_contract():
    memory = build_hybrid_pool(HybridPoolSpec())
    cache = HarnessTarget().build_prefix_cache(memory, sliding_window_size=4)
    assert isinstance(cache, PrefixCache)
    check_methods(RadixCache, PrefixCache)
    assert isinstance(Req(0, [1], SamplingParams()), CacheRequest), "the engine's request is not a CacheRequest"


def test_the_sglang_prefix_cache_methods_meet_the_contract():
    from harness.targets.sglang.prefix_cache import SGLangPrefixCache

    check_methods(SGLangPrefixCache, PrefixCache)
