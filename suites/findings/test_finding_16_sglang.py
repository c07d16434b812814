"""FINDINGS #16: SGLang's torch_native attention backend (its CPU backend wherever AMX kernels are absent) never applies
a layer's ``logit_cap``: Gemma 2's attention softcap (``attn_logit_softcapping`` 50) and Grok's are dropped in both
extend and decode. The scene (``docs/repro/finding_16_sglang_torch_native_drops_softcap.py``) drives SGLang's own
backend over its own pool on handcrafted extend and decode batches, no model and no server, and holds each capped
layer's output to softcapped attention (``cap * tanh(score / cap)`` before the mask and softmax, as transformers'
Gemma 2 computes it); a layer without a cap is the control.

The second test applies the cap the way a fix would (the backend's SDPA call replaced, for a capped layer only, by
attention that caps the scaled scores first), as a monkeypatch, and holds the reproducer to passing."""

from __future__ import annotations

import pytest

from suites.findings.conftest import load_script, reproduce, require_pinned


@pytest.mark.finding(16)
def test_a_capped_layer_caps_its_attention_scores():
    verdict = reproduce(16)
    assert not verdict.bug_present, verdict.message


def test_the_reproducer_passes_once_the_backend_applies_the_cap(monkeypatch):
    found = require_pinned(16)
    from harness.targets.sglang.imports import import_sglang

    import_sglang(any_version=True)
    import torch
    from sglang.srt.layers.attention import torch_native_backend
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    cap_now: dict[str, float] = {}
    sdpa = torch_native_backend.scaled_dot_product_attention

    def capped_sdpa(query, key, value, attn_mask=None, enable_gqa=False, scale=None, is_causal=False, **kwargs):
        cap = cap_now.get("cap", 0.0)
        if cap <= 0:
            return sdpa(
                query,
                key,
                value,
                attn_mask=attn_mask,
                enable_gqa=enable_gqa,
                scale=scale,
                is_causal=is_causal,
                **kwargs,
            )
        if enable_gqa and key.shape[-3] != query.shape[-3]:
            repeat = query.shape[-3] // key.shape[-3]
            key, value = key.repeat_interleave(repeat, dim=-3), value.repeat_interleave(repeat, dim=-3)
        scores = torch.matmul(query, key.transpose(-2, -1)) * (scale if scale is not None else query.shape[-1] ** -0.5)
        scores = cap * torch.tanh(scores / cap)
        allowed = attn_mask
        if is_causal:
            q_len, k_len = scores.shape[-2], scores.shape[-1]
            allowed = torch.ones((q_len, k_len), dtype=torch.bool).tril(diagonal=k_len - q_len)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        return torch.matmul(scores.softmax(-1), value)

    def remembering(name: str):
        original = getattr(TorchNativeAttnBackend, name)

        def run(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
            cap_now["cap"] = float(getattr(layer, "logit_cap", 0.0) or 0.0)
            try:
                return original(self, q, k, v, layer, forward_batch, save_kv_cache, **kwargs)
            finally:
                cap_now.clear()

        return run

    monkeypatch.setattr(torch_native_backend, "scaled_dot_product_attention", capped_sdpa)
    for name in ("forward_extend", "forward_decode"):
        monkeypatch.setattr(TorchNativeAttnBackend, name, remembering(name))
    verdict = load_script(found).reproduce()
    assert not verdict.bug_present, f"with the cap applied: {verdict.message}"
