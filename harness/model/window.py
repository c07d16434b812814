"""The one sliding-window convention every attention implementation uses."""

from __future__ import annotations

import torch


def window_start(position: int | torch.Tensor, window: int | None) -> int | torch.Tensor:
    """First key position visible to a query at `position` (inclusive).

    With ``sliding_window = W`` the query at position ``i`` sees keys ``j`` with
    ``i - W < j <= i``: itself and the ``W - 1`` tokens before it, i.e. exactly
    ``W`` tokens once ``i >= W - 1``. ``window=None`` means full causal attention.

    This is transformers' convention for Gemma2, Gemma3 and Qwen3 alike
    (``masking_utils.sliding_window_overlay``: ``kv_idx > q_idx - sliding_window``),
    checked against their eager masks and logits in ``tests/test_model_window.py``.

    SGLang's attention kernels take the *left extent* instead: its Gemma2/Gemma3
    models pass ``sliding_window - 1`` ("HF is inclusive of the last token, SGLang
    assumes exclusive"). A kernel fed ``W`` where it wanted ``W - 1`` (or the pool
    freeing one slot too early) shifts the window by one token: the classic
    off-by-one regression this harness must catch.

    Works elementwise on tensors (e.g. a ``positions`` tensor) and on ints.
    """
    if window is None:
        return torch.zeros_like(position) if isinstance(position, torch.Tensor) else 0
    if window < 1:
        raise ValueError(f"sliding window must be >= 1, got {window}")
    start = position - (window - 1)
    if isinstance(start, torch.Tensor):
        return start.clamp(min=0)
    return max(start, 0)
