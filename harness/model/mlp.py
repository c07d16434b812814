"""Gated MLP with gate and up projections fused into one matmul."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from harness.model.errors import CheckpointError
from harness.model.linear import linear_weight

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu_pytorch_tanh": partial(F.gelu, approximate="tanh"),
    "gelu": F.gelu,
    "silu": F.silu,
    "swish": F.silu,
}


class GatedMLP(nn.Module):
    """``down(act(gate(x)) * up(x))``; `gate_up` is ``cat([gate, up])`` of the HF weights."""

    def __init__(
        self, hidden_size: int, intermediate_size: int, act: str, dtype: torch.dtype, device: torch.device | str = "cpu"
    ):
        super().__init__()
        if act not in ACTIVATIONS:
            raise CheckpointError(f"unsupported activation {act!r}; supported: {sorted(ACTIVATIONS)}")
        self.act_name = act
        self.act = ACTIVATIONS[act]
        self.gate_up = linear_weight(2 * intermediate_size, hidden_size, dtype, device)
        self.down = linear_weight(hidden_size, intermediate_size, dtype, device)
        # A compiled ``act(gate) * up`` (the engine's ``cpu_kernels``), writing its ``out=``; None: torch ops.
        self.act_and_mul: Callable[..., None] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = F.linear(x, self.gate_up)
        if self.act_and_mul is not None and gate_up.dim() == 2 and gate_up.dtype == torch.float32:
            h = torch.empty((gate_up.shape[0], gate_up.shape[1] // 2), dtype=gate_up.dtype, device=gate_up.device)
            self.act_and_mul(gate_up, out=h)
            return F.linear(h, self.down)
        gate, up = gate_up.chunk(2, dim=-1)
        return F.linear(self.act(gate) * up, self.down)

    def extra_repr(self) -> str:
        return f"gate_up={tuple(self.gate_up.shape)}, down={tuple(self.down.shape)}, act={self.act_name}"
