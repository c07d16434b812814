"""Every training recipe (fixtures/models/train.py) builds a checkpoint the harness model loads and runs
like transformers, before any training: an untrained model, saved as train.py saves it."""

from __future__ import annotations

import pytest
import torch
import transformers

from fixtures.checkpoints import hf_logits, random_sequences
from fixtures.data.tokenizer import build_default_tokenizer
from fixtures.models.train import MODEL_SPECS, build_model, save_checkpoint
from harness.model import load_model, reference_logits


@pytest.mark.parametrize("name", sorted(MODEL_SPECS))
def test_untrained_recipe_checkpoint_loads_in_the_harness_like_transformers(name: str, tmp_path) -> None:
    spec = MODEL_SPECS[name]
    tok = build_default_tokenizer()
    torch.manual_seed(0)
    save_checkpoint(build_model(spec, tok).eval(), tok, spec, tmp_path)
    ours = load_model(tmp_path)
    assert ours.config.sliding_window == spec.sliding_window
    assert ours.config.layer_types == spec.layer_types
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    seq = random_sequences([3 * spec.sliding_window], vocab=tok.get_vocab_size(), seed=0)[0]
    diff = (reference_logits(ours, [seq])[0] - hf_logits(hf, seq)).abs().max().item()
    assert diff <= 1e-4, f"{name}: max abs diff {diff:.3e}"


def test_mellum_recipe_is_dense_untied_and_unsoftcapped() -> None:
    """What SGLang's Mellum needs: no MoE layer, an lm_head of its own, no soft-cap fields."""
    config = MODEL_SPECS["mellum-tiny-swa"].build_config(919, 0, 1, 2)
    assert config.model_type == "mellum" and config.architectures in (None, ["MellumForCausalLM"])
    assert config.mlp_layer_types == ["dense"] * config.num_hidden_layers
    assert config.tie_word_embeddings is False
    assert set(config.rope_parameters) == {"full_attention", "sliding_attention"}
    assert not hasattr(config, "final_logit_softcapping")
