"""Hybrid sliding-window-attention models (Gemma2, Gemma3 text, Qwen3, dense Mellum): pure model math.

The KV pool and engine live elsewhere and plug in through `AttentionBackend`.
"""

from harness.model.attention_api import AttentionBackend, AttentionLayerSpec
from harness.model.config import (
    FULL,
    SLIDING,
    SUPPORTED_MODEL_TYPES,
    HybridModelConfig,
    RopeConfig,
    load_config,
)
from harness.model.dense import DenseAttention, DenseBatch, reference_logits, visible_mask
from harness.model.errors import CheckpointError
from harness.model.model import HybridSWAForCausalLM
from harness.model.tokenizer import Tokenizer, load_tokenizer
from harness.model.weights import expected_tensors, load_model
from harness.model.window import window_start

__all__ = [
    "FULL",
    "SLIDING",
    "SUPPORTED_MODEL_TYPES",
    "AttentionBackend",
    "AttentionLayerSpec",
    "CheckpointError",
    "DenseAttention",
    "DenseBatch",
    "HybridModelConfig",
    "HybridSWAForCausalLM",
    "RopeConfig",
    "Tokenizer",
    "expected_tensors",
    "load_config",
    "load_model",
    "load_tokenizer",
    "reference_logits",
    "visible_mask",
    "window_start",
]
