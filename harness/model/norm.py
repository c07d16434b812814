"""RMSNorm in the two flavours the supported architectures use."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class RMSNorm(nn.Module):
    """``x / rms(x) * scale`` over the last dim, computed in fp32.

    `scale` holds the *effective* multiplier, prepared by the weight loader so the
    forward pass is one code path per flavour:

    * Gemma (``gemma=True``): ``scale = 1 + w`` kept in fp32, multiplied before the
      cast back (transformers: ``(x * (1 + w.float())).type_as(x)``).
    * Qwen/Llama (``gemma=False``): ``scale = w`` in the model dtype, multiplied
      after the cast back (transformers: ``w * x.to(input_dtype)``).

    `shape` may be 2-D (e.g. ``[heads, head_dim]``) to normalise q and k heads with
    different weights in a single call; the reduction is always over the last dim.

    Other dtypes follow transformers' formula op for op (and bit for bit); fp32 computes ``mean(x^2)``
    as ``|x|^2 / n`` (`_inv_rms`), a decode step's largest group of ops made smaller, within a few ulp.
    """

    def __init__(
        self,
        shape: int | tuple[int, ...],
        eps: float,
        gemma: bool,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
    ):
        super().__init__()
        self.eps = eps
        self.gemma = gemma
        scale_dtype = torch.float32 if gemma else dtype
        self.scale = nn.Parameter(torch.ones(shape, dtype=scale_dtype, device=device), requires_grad=False)
        # eps as a tensor: the same fp32 value a Python float becomes, without boxing it on every call
        self.register_buffer("eps_t", torch.tensor(eps, dtype=torch.float32, device=device), persistent=False)
        # A compiled fp32 norm (the engine's ``cpu_kernels``: ``rms_norm(x, scale, eps, residual, out=)``), set
        # only on norms with one scale per feature (``HybridSWAForCausalLM.use_kernels``); None: the torch ops
        # below, which are its reference.
        self.kernel: Callable[..., None] | None = None

    def _use_kernel(self, x: torch.Tensor) -> bool:
        return self.kernel is not None and x.dtype == torch.float32 and x.is_contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._use_kernel(x):
            out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            self.kernel(x, self.scale, self.eps, None, out=out)
            return out
        # dtype checks are static per model, so fp32 models record no no-op casts.
        if x.dtype == torch.float32:
            xf = x * self._inv_rms(x)
            return xf * self.scale if self.gemma else self.scale * xf
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps_t)
        if self.gemma:
            return (xf * self.scale).to(x.dtype)
        return self.scale * xf.to(x.dtype)

    def add_to(self, residual: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """``residual + self(x)``; in fp32 the scale and the add are one ``addcmul`` (fused multiply-add:
        within an ulp of the two-op sum)."""
        if x.dtype != torch.float32 or residual.dtype != torch.float32:
            return residual + self(x)
        if self._use_kernel(x) and residual.is_contiguous() and residual.shape == x.shape:
            out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            self.kernel(x, self.scale, self.eps, residual, out=out)
            return out
        return torch.addcmul(residual, x * self._inv_rms(x), self.scale)

    def _inv_rms(self, x: torch.Tensor) -> torch.Tensor:
        """fp32 ``rsqrt(mean(x^2) + eps)`` with ``mean(x^2) = |x|^2 / n`` from one ``vector_norm``: two ops
        fewer than pow + mean + add, and cheaper ones, within a few ulp of transformers' formula."""
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        return torch.rsqrt(torch.addcmul(self.eps_t, norm, norm, value=1.0 / x.shape[-1]))

    def extra_repr(self) -> str:
        return f"{tuple(self.scale.shape)}, eps={self.eps}, gemma={self.gemma}"
