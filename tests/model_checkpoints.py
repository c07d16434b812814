"""Tiny random-init HF checkpoints for the model tests (built offline, cached per process).

Weights are re-drawn with larger-than-init scales (norm weights included) so that
attention is far from uniform, soft-caps are in their non-linear range, and a
window that is off by one token visibly changes the logits.
"""

from __future__ import annotations

import atexit
import copy
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import torch
import transformers

ARCHS = ("gemma2", "gemma3_text", "qwen3")

# Small dims; heads * head_dim != hidden on purpose, and query_pre_attn_scalar != head_dim.
_COMMON: dict[str, Any] = dict(
    vocab_size=128, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
    head_dim=24, max_position_embeddings=256, rms_norm_eps=1e-6,
)
CONFIGS: dict[str, dict[str, Any]] = {
    "gemma2": dict(
        _COMMON, num_hidden_layers=4, sliding_window=6, query_pre_attn_scalar=16,
        attn_logit_softcapping=4.0, final_logit_softcapping=10.0,
    ),
    "gemma3_text": dict(
        # default layer_types for 6 layers: 5 sliding, then 1 full
        _COMMON, num_hidden_layers=6, sliding_window=5, query_pre_attn_scalar=16,
        final_logit_softcapping=10.0,
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
        },
    ),
    "qwen3": dict(
        _COMMON, num_hidden_layers=4, sliding_window=7, use_sliding_window=True, attention_bias=True,
        layer_types=["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
    ),
}
_CLASSES = {
    "gemma2": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM),
    "gemma3_text": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
}

_ROOT = Path(tempfile.mkdtemp(prefix="swa-model-ckpt-"))
atexit.register(shutil.rmtree, _ROOT, ignore_errors=True)


def hf_config(arch: str, **overrides: Any) -> transformers.PreTrainedConfig:
    config_cls, _ = _CLASSES[arch]
    return config_cls(**copy.deepcopy({**CONFIGS[arch], **overrides}))


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Redraw every parameter: matrices ~ N(0, 0.15^2) (embeddings 0.5), norms w += N(0, 0.3^2)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name:
                p.add_(0.3 * noise)
            elif "embed" in name:
                p.copy_(0.5 * noise)
            else:
                p.copy_(0.15 * noise)


def write_checkpoint(arch: str, path: Path, seed: int = 0, **overrides: Any) -> Path:
    """Save a random-init `arch` checkpoint (config.json + model.safetensors) to `path`."""
    _, model_cls = _CLASSES[arch]
    torch.manual_seed(seed)
    model = model_cls(hf_config(arch, **overrides)).float()
    randomize_(model, seed)
    model.save_pretrained(path, safe_serialization=True)
    return path


@cache
def checkpoint(arch: str, seed: int = 0) -> Path:
    """Cached read-only checkpoint dir for `arch` (copy it before modifying)."""
    return write_checkpoint(arch, _ROOT / f"{arch}-{seed}", seed)


@cache
def hf_model(arch: str, seed: int = 0) -> transformers.PreTrainedModel:
    """transformers' own model for `checkpoint(arch)`, eager attention, fp32."""
    return transformers.AutoModelForCausalLM.from_pretrained(
        checkpoint(arch, seed), attn_implementation="eager", dtype=torch.float32
    ).eval()


@torch.inference_mode()
def hf_logits(model: transformers.PreTrainedModel, tokens: list[int]) -> torch.Tensor:
    """Teacher-forced logits ``[len(tokens), vocab]`` for one sequence (no padding)."""
    return model(torch.tensor([tokens]), use_cache=False).logits[0].float()


def random_sequences(lengths: list[int], vocab: int = 128, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]


def copy_checkpoint(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
