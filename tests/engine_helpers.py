"""Untied random-init checkpoints (greedy outputs are diverse, unlike tied ones) and engine builders."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch
import transformers

from harness.engine import Engine, EngineConfig
from tests.model_checkpoints import _ROOT, write_checkpoint


@cache
def untied_checkpoint(arch: str, seed: int = 0) -> Path:
    return write_checkpoint(arch, _ROOT / f"{arch}-untied-{seed}", seed, tie_word_embeddings=False)


@cache
def hf_untied(arch: str, seed: int = 0) -> transformers.PreTrainedModel:
    model = transformers.AutoModelForCausalLM.from_pretrained(
        untied_checkpoint(arch, seed), attn_implementation="eager", dtype=torch.float32
    ).eval()
    model.generation_config.eos_token_id = None  # compare fixed-length greedy runs
    return model


def make_engine(arch: str, graphs: str = "tape", **overrides) -> Engine:
    config = dict(model_path=untied_checkpoint(arch), graphs=graphs, max_running_requests=32,
                  chunk_size=16, max_prefill_tokens=64)
    return Engine(EngineConfig(**{**config, **overrides}))


@torch.inference_mode()
def hf_greedy(model: transformers.PreTrainedModel, prompt: list[int], max_new_tokens: int) -> list[int]:
    ids = torch.tensor([prompt])
    # An explicit mask: otherwise generate() infers one from pad_token_id and hides prompt tokens equal to it.
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                         do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()
