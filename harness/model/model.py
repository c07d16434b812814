"""The hybrid sliding-window causal LM over a flat ragged token layout."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.model.attention_api import AttentionBackend, AttentionLayerSpec
from harness.model.config import HybridModelConfig
from harness.model.decoder import DecoderLayer
from harness.model.linear import linear_weight
from harness.model.mlp import GatedMLP
from harness.model.norm import RMSNorm
from harness.model.rotary import RotaryTables


class HybridSWAForCausalLM(nn.Module):
    """Gemma2 / Gemma3-text / Qwen3 / Mellum (dense MLPs only) decoder with pluggable attention.

    Tokens of several sequences are concatenated (SGLang style): ``input_ids``
    and ``positions`` are ``[T]``; what belongs to which sequence, and which keys
    each query sees, is known only to the `AttentionBackend` via `batch`.
    Weights are held fused (qkv, gate_up) so a decode step is a short, fixed
    list of ops. Build it with `harness.model.load_model`; the constructor
    allocates uninitialised weights.
    """

    def __init__(
        self,
        config: HybridModelConfig,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        max_positions: int | None = None,
    ):
        super().__init__()
        self.config = config
        self.dtype = dtype
        self.max_positions = max_positions or config.max_position_embeddings

        def param(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(*shape, dtype=dtype, device=device), requires_grad=False)

        self.embed = param(config.vocab_size, config.hidden_size)
        # tied: the embedding's rows stay contiguous for the lookup, so the LM head reads them transposed
        self.lm_head = (
            None if config.tie_word_embeddings else linear_weight(config.vocab_size, config.hidden_size, dtype, device)
        )
        # transformers keeps the scale as a tensor cast to the weight dtype
        # (sqrt(3072) becomes 55.5 in bf16), so we do too.
        if config.embed_scale != 1.0:
            scale = torch.tensor(config.embed_scale, dtype=torch.float32).to(dtype).to(device)
            self.register_buffer("embed_scale", scale, persistent=False)
        else:
            self.embed_scale = None
        # the cap as a tensor: the fp32 value the Python float becomes, not boxed again on every forward
        if config.final_logit_softcap is not None:
            cap = torch.tensor(config.final_logit_softcap, dtype=torch.float32, device=device)
            self.register_buffer("final_softcap", cap, persistent=False)
        else:
            self.final_softcap = None
        self.layers = nn.ModuleList(
            DecoderLayer(config, layer_id=i, dtype=dtype, device=device) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(
            config.hidden_size, eps=config.rms_norm_eps, gemma=config.gemma_norm, dtype=dtype, device=device
        )

        # One table per distinct RoPE (Gemma3: local and global bases).
        ropes = list(dict.fromkeys(config.rope_for(i) for i in range(config.num_hidden_layers)))
        self.rotary = nn.ModuleList(
            RotaryTables(r, head_dim=config.head_dim, max_positions=self.max_positions, dtype=dtype, device=device)
            for r in ropes
        )
        self.layer_rope = tuple(ropes.index(config.rope_for(i)) for i in range(config.num_hidden_layers))
        self.kernels: dict[str, Callable[..., None] | None] = {"gelu_tanh_and_mul": None, "rms_norm": None}

    def use_kernels(
        self, *, gelu_tanh_and_mul: Callable[..., None] | None, rms_norm: Callable[..., None] | None
    ) -> None:
        """Compiled ``out=`` ops for every tanh-GELU MLP's ``gelu(gate) * up`` and every RMSNorm (the
        engine's ``cpu_kernels``); None: torch ops."""
        self.kernels = {"gelu_tanh_and_mul": gelu_tanh_and_mul, "rms_norm": rms_norm}
        for module in self.modules():
            if isinstance(module, RMSNorm):  # per-head q/k norms (a 2-D scale) stay torch ops
                module.kernel = rms_norm if module.scale.dim() == 1 else None
            elif isinstance(module, GatedMLP) and module.act_name == "gelu_pytorch_tanh":
                module.act_and_mul = gelu_tanh_and_mul

    @contextmanager
    def torch_ops_only(self) -> Iterator[None]:
        """Torch ops in every norm and MLP while inside, whatever kernels are in use (the dense reference
        checks the kernels; it must not run them)."""
        saved = self.kernels
        self.use_kernels(gelu_tanh_and_mul=None, rms_norm=None)
        try:
            yield
        finally:
            self.use_kernels(**saved)

    @property
    def lm_head_weight(self) -> torch.Tensor:
        return self.embed if self.lm_head is None else self.lm_head

    @property
    def layer_specs(self) -> tuple[AttentionLayerSpec, ...]:
        """Per-layer attention specs, e.g. for sizing a KV pool."""
        return tuple(layer.attn.spec for layer in self.layers)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        attention: AttentionBackend,
        batch: Any,
        logits_indices: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits ``float32 [T, vocab]``, or ``[len(logits_indices), vocab]`` when given.

        `logits_indices` selects rows (e.g. each sequence's last token in a
        prefill) before the final norm and LM head; the rest are never computed.
        """
        hidden = self.hidden_states(input_ids, positions, attention, batch)
        if logits_indices is not None:
            hidden = hidden[logits_indices]
        return self.compute_logits(hidden)

    def hidden_states(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attention: AttentionBackend, batch: Any
    ) -> torch.Tensor:
        """Residual stream after the last layer, ``[T, hidden]``, before the final norm."""
        x = F.embedding(input_ids, self.embed)
        if self.embed_scale is not None:
            x = x * self.embed_scale
        rope = [tables.for_positions(positions) for tables in self.rotary]
        for layer, r in zip(self.layers, self.layer_rope):
            x = layer(x, rope[r], attention, batch)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm, LM head and optional soft-cap ``tanh(l / cap) * cap``; float32 out."""
        logits = F.linear(self.norm(hidden), self.lm_head_weight)
        if self.final_softcap is not None:
            logits = torch.tanh(logits / self.final_softcap) * self.final_softcap
        return logits if logits.dtype == torch.float32 else logits.float()
