"""FINDINGS #15: SGLang's torch_native attention backend (its CPU backend) gives an encoder-only layer no sliding
window: ``forward_extend`` passes ``layer.sliding_window_size`` only when the layer is causal, so a bidirectional
sliding-window layer (``EmbeddingGemma2Model``'s, window 512) attends to the whole sequence. The scene
(``docs/repro/finding_15_sglang_encoder_swa_window_ignored.py``) drives SGLang's own backend over its own hybrid pool on
one handcrafted extend batch, no model and no server, and holds the layer's output to attention over keys at most the
window away in either direction (the window FlashAttention's backend gives such a layer, ``(W, W)``).

The control applies the change sgl-project/sglang#39298 describes (open: the window passed for non-causal layers too,
and a bidirectional mask for them), written here as a monkeypatch, and holds the reproducer to passing."""

from __future__ import annotations

import pytest

from suites.findings.conftest import load_script, reproduce, require_pinned


@pytest.mark.finding(15)
def test_an_encoder_only_sliding_layer_attends_within_its_window():
    verdict = reproduce(15)
    assert not verdict.bug_present, verdict.message


def test_the_reproducer_passes_once_encoder_only_layers_get_a_bidirectional_window(monkeypatch):
    found = require_pinned(15)
    from harness.targets.sglang.imports import import_sglang

    import_sglang(any_version=True)
    import torch
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.layers.radix_attention import AttentionType

    layer_now: dict[str, object] = {}
    forward_extend = TorchNativeAttnBackend.forward_extend
    run_extend = TorchNativeAttnBackend._run_sdpa_forward_extend

    def remembering_the_layer(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        layer_now["layer"] = layer
        try:
            return forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache)
        finally:
            layer_now.clear()

    def with_the_window(self, *args, **kwargs):
        layer = layer_now.get("layer")
        bidirectional = (
            layer is not None
            and layer.attn_type == AttentionType.ENCODER_ONLY
            and not layer.is_cross_attention
            and layer.sliding_window_size is not None
            and layer.sliding_window_size > -1
        )
        if bidirectional:
            kwargs["sliding_window_size"] = layer.sliding_window_size
            layer_now["bidirectional"] = True
        try:
            return run_extend(self, *args, **kwargs)
        finally:
            layer_now.pop("bidirectional", None)

    def mask(*, q_len, kv_len, sliding_window_size, device, query_offset=0):
        q_pos = torch.arange(query_offset, query_offset + q_len, device=device).unsqueeze(1)
        k_pos = torch.arange(kv_len, device=device).unsqueeze(0)
        if layer_now.get("bidirectional"):
            return (q_pos - k_pos).abs() <= sliding_window_size
        return (k_pos <= q_pos) & (k_pos >= q_pos - sliding_window_size)

    monkeypatch.setattr(TorchNativeAttnBackend, "forward_extend", remembering_the_layer)
    monkeypatch.setattr(TorchNativeAttnBackend, "_run_sdpa_forward_extend", with_the_window)
    monkeypatch.setattr(TorchNativeAttnBackend, "_make_sliding_window_mask", staticmethod(mask))
    verdict = load_script(found).reproduce()
    assert not verdict.bug_present, f"with a bidirectional window for encoder-only layers: {verdict.message}"
