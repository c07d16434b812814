"""Engine defaults that fit the machine: the context cap and the memory-fitted full pool, each warned."""

from __future__ import annotations

import logging

import pytest

import harness.engine.engine as engine_module
from fixtures.checkpoints import write_checkpoint
from harness.engine import Engine, EngineConfig
from harness.engine.engine import DEFAULT_CONTEXT_CAP


@pytest.fixture(scope="module")
def long_context_checkpoint(tmp_path_factory):
    """gemma3_text with a real model's context (32k positions), tiny otherwise."""
    return write_checkpoint("gemma3_text", tmp_path_factory.mktemp("long") / "ckpt", max_position_embeddings=32768)


def test_default_context_is_capped_with_a_warning(long_context_checkpoint, caplog):
    with caplog.at_level(logging.WARNING, logger="harness.engine.engine"):
        engine = Engine(EngineConfig(long_context_checkpoint, graphs="off", max_running_requests=4))
    assert engine.max_context_len == DEFAULT_CONTEXT_CAP
    assert engine.runner.req_to_token_pool.max_context_len == DEFAULT_CONTEXT_CAP
    assert any(
        f"max_context_len capped at {DEFAULT_CONTEXT_CAP}" in r.getMessage() and "32768" in r.getMessage()
        for r in caplog.records
    )


def test_explicit_context_is_not_capped(long_context_checkpoint, caplog):
    with caplog.at_level(logging.WARNING, logger="harness.engine.engine"):
        engine = Engine(
            EngineConfig(long_context_checkpoint, graphs="off", max_running_requests=2, max_context_len=8192)
        )
    assert engine.max_context_len == 8192 and not caplog.records


def test_full_pool_shrinks_to_the_memory_budget(long_context_checkpoint, caplog, monkeypatch):
    # 1 full layer x 2 (K, V) x 2 KV heads x 24 dims x 4 bytes = 384 bytes per token
    monkeypatch.setattr(engine_module, "available_memory_bytes", lambda device: 4 * 4096 * 384 * 2)
    with caplog.at_level(logging.WARNING, logger="harness.engine.engine"):
        engine = Engine(
            EngineConfig(long_context_checkpoint, graphs="off", max_running_requests=32, kv_memory_fraction=0.5)
        )
    assert engine.runner.allocator.size == 4 * 4096  # not 32 x 4096
    assert any("full KV pool capped at 16384 slots" in r.getMessage() for r in caplog.records)
    # never below one whole context: a request that fits the context still fits the pool
    monkeypatch.setattr(engine_module, "available_memory_bytes", lambda device: 1024)
    engine = Engine(EngineConfig(long_context_checkpoint, graphs="off", max_running_requests=32))
    assert engine.runner.allocator.size == DEFAULT_CONTEXT_CAP
    out = engine.generate([[5] * 100], engine_module.SamplingParams(max_new_tokens=4, ignore_eos=True))
    assert len(out[0].output_ids) == 4 and engine.pools_idle()


def test_explicit_full_pool_size_wins(long_context_checkpoint, monkeypatch):
    monkeypatch.setattr(engine_module, "available_memory_bytes", lambda device: 1024)
    engine = Engine(EngineConfig(long_context_checkpoint, graphs="off", max_running_requests=2, full_pool_size=9000))
    assert engine.runner.allocator.size == 9000


def test_kv_memory_fraction_is_checked():
    with pytest.raises(ValueError, match="kv_memory_fraction"):
        EngineConfig("x", kv_memory_fraction=0)
