"""Engine builders over the untied random-init checkpoints, and transformers' greedy generation."""

from __future__ import annotations

import torch
import transformers

from fixtures.checkpoints import hf_untied, untied_checkpoint
from harness.engine import Engine, EngineConfig

__all__ = ["hf_greedy", "hf_untied", "make_engine", "untied_checkpoint"]


def make_engine(arch: str, graphs: str = "tape", **overrides) -> Engine:
    config = dict(
        model_path=untied_checkpoint(arch), graphs=graphs, max_running_requests=32, chunk_size=16, max_prefill_tokens=64
    )
    return Engine(EngineConfig(**{**config, **overrides}))


@torch.inference_mode()
def hf_greedy(model: transformers.PreTrainedModel, prompt: list[int], max_new_tokens: int) -> list[int]:
    ids = torch.tensor([prompt])
    # An explicit mask: otherwise generate() infers one from pad_token_id and hides prompt tokens equal to it.
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0
    )
    return out[0, len(prompt) :].tolist()
