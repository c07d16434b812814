"""The sliding-window convention: i - W < j <= i, checked against transformers."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

from harness.model import load_model, reference_logits, visible_mask, window_start
from fixtures.checkpoints import ARCHS, checkpoint, hf_logits, hf_model, random_sequences

TOL = 1e-4


def test_window_start_semantics() -> None:
    # W = 4: position 10 sees 7, 8, 9, 10 (itself and the 3 before it).
    assert window_start(10, 4) == 7
    assert window_start(2, 4) == 0  # clamped at the sequence start
    assert window_start(3, 4) == 0
    assert window_start(4, 4) == 1
    assert window_start(10, 1) == 10  # W = 1: only itself
    assert window_start(10, None) == 0  # full attention
    pos = torch.arange(8)
    assert window_start(pos, 3).tolist() == [0, 0, 0, 1, 2, 3, 4, 5]
    assert window_start(pos, None).tolist() == [0] * 8
    with pytest.raises(ValueError):
        window_start(5, 0)


@pytest.mark.parametrize("window", [1, 2, 5])
def test_visible_mask_counts_exactly_window_tokens(window: int) -> None:
    mask = visible_mask(12, window)
    assert mask.sum(-1).tolist() == [min(i + 1, window) for i in range(12)]


@pytest.mark.parametrize("arch", ARCHS)
def test_masks_equal_transformers_masks(arch: str) -> None:
    """Our per-layer windows and masks equal the eager masks transformers builds."""
    hf = hf_model(arch)
    model = load_model(checkpoint(arch))
    n = 20
    kwargs = dict(
        config=hf.config,
        inputs_embeds=torch.zeros(1, n, hf.config.hidden_size),
        attention_mask=None,
        past_key_values=None,
        position_ids=torch.arange(n)[None],
    )
    hf_masks = {
        "sliding_attention": create_sliding_window_causal_mask(**kwargs)[0, 0] == 0,
        "full_attention": create_causal_mask(**kwargs)[0, 0] == 0,
    }
    for layer_id, (hf_layer, spec) in enumerate(zip(hf.model.layers, model.layer_specs)):
        assert spec.sliding_window == hf_layer.self_attn.sliding_window, layer_id
        want = hf_masks[hf.config.layer_types[layer_id]]
        assert torch.equal(visible_mask(n, spec.sliding_window), want), f"{arch} layer {layer_id}"
    assert model.config.sliding_window == hf.config.sliding_window


@pytest.mark.parametrize("arch", ARCHS)
def test_off_by_one_window_is_caught(arch: str) -> None:
    """The parity check has teeth: W matches transformers, W - 1 and W + 1 do not."""
    path = checkpoint(arch)
    config = load_model(path).config
    seq = random_sequences([40], seed=5)[0]
    want = hf_logits(hf_model(arch), seq)
    diffs = {}
    for delta in (-1, 0, 1):
        cfg = dataclasses.replace(config, sliding_window=config.sliding_window + delta)
        got = reference_logits(load_model(path, config=cfg), [seq])[0]
        diffs[delta] = (got - want).abs().max().item()
    assert diffs[0] <= TOL, f"{arch}: correct window W={config.sliding_window} differs by {diffs[0]:.3e}"
    for delta in (-1, 1):
        assert diffs[delta] > 100 * TOL, f"{arch}: W{delta:+d} not detected (diff {diffs[delta]:.3e})"
    print(f"{arch} W={config.sliding_window} diffs: " + ", ".join(f"W{d:+d}={v:.3e}" for d, v in diffs.items()))
