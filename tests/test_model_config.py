"""config.json parsing: layer types, windows, RoPE and defaults exactly as transformers reads them."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from transformers.models.auto.configuration_auto import CONFIG_MAPPING

from harness.model import CheckpointError, HybridModelConfig, load_config, load_model, reference_logits
from harness.model.rotary import inv_freq
from fixtures.checkpoints import hf_logits, random_sequences, write_checkpoint

F, S = "full_attention", "sliding_attention"

# (model_type, config.json fragment): defaults, legacy keys and the layer-type rules.
CASES = [
    ("gemma2", {}),
    ("gemma2", {"num_hidden_layers": 5, "sliding_window": 3}),
    ("gemma2", {"num_hidden_layers": 4, "layer_types": [F, S, S, F], "rope_theta": 5000.0}),
    ("gemma2", {"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "head_dim": 64}),
    ("gemma2", {"attn_logit_softcapping": None, "final_logit_softcapping": None, "is_hybrid_swa": True}),
    ("gemma3_text", {}),
    ("gemma3_text", {"num_hidden_layers": 13}),
    ("gemma3_text", {"num_hidden_layers": 7, "sliding_window_pattern": 3}),
    ("gemma3_text", {"rope_theta": 2e6, "rope_local_base_freq": 2e4, "sliding_window": 512}),
    ("gemma3_text", {"rope_scaling": {"rope_type": "linear", "factor": 8.0}, "final_logit_softcapping": 30.0}),
    (
        "gemma3_text",
        {
            "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": 3e5},
                "sliding_attention": {"rope_type": "default", "rope_theta": 3e3},
            }
        },
    ),
    ("gemma3_text", {"rope_parameters": {"full_attention": {"rope_type": "default"}}, "rope_local_base_freq": 7e3}),
    ("qwen3", {}),
    ("qwen3", {"sliding_window": 9}),  # ignored: use_sliding_window defaults to false
    ("qwen3", {"use_sliding_window": True, "sliding_window": 9, "max_window_layers": 2, "num_hidden_layers": 5}),
    ("qwen3", {"use_sliding_window": True, "sliding_window": 4, "num_hidden_layers": 4, "layer_types": [S, F, S, F]}),
    ("qwen3", {"num_key_value_heads": None, "rope_theta": 1e6, "tie_word_embeddings": True}),
    ("qwen3", {"rope_scaling": {"type": "linear", "factor": 4.0}}),
    ("mellum", {"mlp_layer_types": ["dense"] * 28}),  # all full attention, the default RoPE pair
    (
        "mellum",
        {"num_hidden_layers": 4, "layer_types": [S, F, S, F], "mlp_layer_types": ["dense"] * 4, "sliding_window": 16},
    ),
    (
        "mellum",
        {
            "num_hidden_layers": 3,
            "layer_types": [S, S, S],
            "mlp_layer_types": ["dense"] * 3,
            "rope_parameters": {S: {"rope_type": "default", "rope_theta": 2e4}},
        },
    ),
    (
        "mellum",
        {
            "num_hidden_layers": 2,
            "layer_types": [F, S],
            "mlp_layer_types": ["dense"] * 2,
            "head_dim": 64,
            "tie_word_embeddings": True,
            "attention_bias": True,
            "rope_parameters": {
                F: {"rope_type": "linear", "factor": 4.0, "rope_theta": 1e5},
                S: {"rope_type": "default", "rope_theta": 1e4},
            },
        },
    ),
]


def _hf(model_type: str, fragment: dict) -> transformers.PreTrainedConfig:
    return CONFIG_MAPPING[model_type].from_dict({"model_type": model_type, **json.loads(json.dumps(fragment))})


def _hf_rope(hf: transformers.PreTrainedConfig, layer_type: str) -> dict:
    params = hf.rope_parameters
    return params[layer_type] if layer_type in params else params


def _hf_inv_freq(hf: transformers.PreTrainedConfig, layer_type: str) -> torch.Tensor:
    if hf.model_type == "gemma3_text":
        rotary = transformers.models.gemma3.modeling_gemma3.Gemma3RotaryEmbedding(hf)
        return getattr(rotary, f"{layer_type}_inv_freq")
    if hf.model_type == "mellum":
        rotary = transformers.models.mellum.modeling_mellum.MellumRotaryEmbedding(hf)
        return getattr(rotary, f"{layer_type}_inv_freq")
    module = {
        "gemma2": transformers.models.gemma2.modeling_gemma2.Gemma2RotaryEmbedding,
        "qwen3": transformers.models.qwen3.modeling_qwen3.Qwen3RotaryEmbedding,
    }[hf.model_type]
    return module(hf).inv_freq


@pytest.mark.parametrize(("model_type", "fragment"), CASES, ids=lambda x: x if isinstance(x, str) else None)
def test_parse_matches_transformers(model_type: str, fragment: dict) -> None:
    ours = HybridModelConfig.from_hf({"model_type": model_type, **json.loads(json.dumps(fragment))})
    hf = _hf(model_type, fragment)
    assert list(ours.layer_types) == hf.layer_types
    assert ours.sliding_window == hf.sliding_window
    assert ours.sliding_layer_ids == tuple(i for i, t in enumerate(hf.layer_types) if t == S)
    assert ours.full_layer_ids == tuple(i for i, t in enumerate(hf.layer_types) if t == F)
    for name in (
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "rms_norm_eps",
        "attention_bias",
        "tie_word_embeddings",
    ):
        assert getattr(ours, name) == getattr(hf, name), name
    act = hf.hidden_act if model_type in ("qwen3", "mellum") else hf.hidden_activation
    assert ours.hidden_act == act
    if model_type in ("qwen3", "mellum"):
        assert ours.attn_scaling == hf.head_dim**-0.5
        assert ours.attn_logit_softcap is None and ours.final_logit_softcap is None
    else:
        assert ours.attn_scaling == hf.query_pre_attn_scalar**-0.5
        assert ours.final_logit_softcap == hf.final_logit_softcapping
        want_attn_cap = hf.attn_logit_softcapping if model_type == "gemma2" else None
        assert ours.attn_logit_softcap == want_attn_cap
    for layer_type, rope in ((F, ours.rope_full), (S, ours.rope_sliding)):
        if model_type == "mellum" and layer_type not in hf.layer_types:
            continue  # transformers builds (and may lack parameters for) only the layer types in use
        params = _hf_rope(hf, layer_type)
        assert rope.theta == params["rope_theta"], layer_type
        assert rope.rope_type == params["rope_type"], layer_type
        assert rope.factor == params.get("factor", 1.0), layer_type
        assert torch.equal(inv_freq(rope, ours.head_dim), _hf_inv_freq(hf, layer_type)), layer_type
    assert ours.is_hybrid_swa == bool(fragment.get("is_hybrid_swa", False))


def test_is_hybrid_swa_flag_changes_nothing_else() -> None:
    base = HybridModelConfig.from_hf({"model_type": "gemma2"})
    flagged = HybridModelConfig.from_hf({"model_type": "gemma2", "is_hybrid_swa": True})
    assert flagged.is_hybrid_swa and not base.is_hybrid_swa
    assert flagged == HybridModelConfig(**{**base.__dict__, "is_hybrid_swa": True})


def test_layer_types_decide_which_layers_slide(tmp_path) -> None:
    """A custom [full, sliding, sliding, full] pattern (not Gemma2's default
    [sliding, full, sliding, full]) is what the model uses, and transformers agrees."""
    pattern = [F, S, S, F]
    custom = write_checkpoint("gemma2", tmp_path / "custom", seed=3, layer_types=pattern)
    default = write_checkpoint("gemma2", tmp_path / "default", seed=3)
    cfg = load_config(custom)
    assert cfg.layer_types == tuple(pattern)
    assert cfg.sliding_layer_ids == (1, 2) and cfg.full_layer_ids == (0, 3)
    assert [cfg.is_sliding(i) for i in range(4)] == [False, True, True, False]
    assert load_config(default).sliding_layer_ids == (0, 2)

    model = load_model(custom)
    assert [s.sliding_window for s in model.layer_specs] == [None, 6, 6, None]
    seq = random_sequences([30], seed=6)[0]
    ours = reference_logits(model, [seq])[0]
    hf = transformers.AutoModelForCausalLM.from_pretrained(custom, attn_implementation="eager").eval()
    diff = (ours - hf_logits(hf, seq)).abs().max().item()
    assert diff <= 1e-4, f"custom layer_types: max abs diff {diff:.3e}"
    # Same weights read with the default pattern give different logits.
    swapped = load_model(default, config=load_config(default)).config
    assert swapped.sliding_layer_ids != cfg.sliding_layer_ids
    other = reference_logits(load_model(custom, config=swapped), [seq])[0]
    assert (other - ours).abs().max().item() > 1e-2


def test_gemma3_default_pattern_is_five_local_one_global() -> None:
    cfg = HybridModelConfig.from_hf({"model_type": "gemma3_text", "num_hidden_layers": 12})
    assert cfg.full_layer_ids == (5, 11)
    assert cfg.rope_sliding.theta == 10_000.0 and cfg.rope_full.theta == 1_000_000.0
    assert cfg.rope_for(5) == cfg.rope_full and cfg.rope_for(4) == cfg.rope_sliding
    assert cfg.layer_window(5) is None and cfg.layer_window(4) == 4096


@pytest.mark.parametrize(
    ("hf", "needle"),
    [
        ({"model_type": "llama"}, "'llama'"),
        ({"architectures": ["Foo"]}, "None"),
        ({"model_type": "qwen3", "num_hidden_layers": 2, "layer_types": [F, S]}, "use_sliding_window"),
        ({"model_type": "gemma2", "num_hidden_layers": 3, "layer_types": [F, S]}, "num_hidden_layers=3"),
        (
            {"model_type": "gemma2", "num_hidden_layers": 2, "layer_types": [F, "chunked_attention"]},
            "chunked_attention",
        ),
        ({"model_type": "gemma2", "sliding_window": None}, "sliding_window"),
        ({"model_type": "gemma3_text", "use_bidirectional_attention": True}, "use_bidirectional_attention"),
        ({"model_type": "qwen3", "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "yarn"),
        ({"model_type": "qwen3", "hidden_act": "relu2"}, "relu2"),
        # Mellum: MoE layers are refused by name, as is anything transformers and SGLang read differently.
        ({"model_type": "mellum"}, "mlp_layer_types"),
        (
            {"model_type": "mellum", "num_hidden_layers": 3, "mlp_layer_types": ["dense", "sparse", "sparse"]},
            "mlp_layer_types marks layer(s) [1, 2] 'sparse'",
        ),
        ({"model_type": "mellum", "num_hidden_layers": 2, "mlp_layer_types": ["dense"]}, "num_hidden_layers=2"),
        ({"model_type": "mellum", "num_hidden_layers": 1, "mlp_layer_types": ["moe"]}, "'moe'"),
        (
            {
                "model_type": "mellum",
                "num_hidden_layers": 2,
                "layer_types": [S, F],
                "mlp_layer_types": ["dense"] * 2,
                "rope_parameters": {"rope_type": "default", "rope_theta": 1e4},
            },
            "nested per layer type",
        ),
        (
            {
                "model_type": "mellum",
                "num_hidden_layers": 1,
                "mlp_layer_types": ["dense"],
                "rope_parameters": {F: {"rope_type": "default"}},
            },
            "rope_theta",
        ),
        (
            {
                "model_type": "mellum",
                "num_hidden_layers": 1,
                "mlp_layer_types": ["dense"],
                "rope_parameters": {F: {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
            },
            "partial_rotary_factor",
        ),
        (
            {
                "model_type": "mellum",
                "num_hidden_layers": 1,
                "layer_types": [S],
                "mlp_layer_types": ["dense"],
                "sliding_window": None,
            },
            "sliding_window",
        ),
    ],
)
def test_bad_configs_raise_checkpoint_error(hf: dict, needle: str) -> None:
    with pytest.raises(CheckpointError) as err:
        HybridModelConfig.from_hf(hf)
    assert needle in str(err.value)
    if "unsupported model_type" in str(err.value):
        for supported in ("gemma2", "gemma3_text", "qwen3", "mellum"):
            assert supported in str(err.value)


def test_legacy_attention_layer_type_is_full() -> None:
    cfg = HybridModelConfig.from_hf(
        {"model_type": "gemma2", "num_hidden_layers": 2, "layer_types": ["attention", "sliding_attention"]}
    )
    assert cfg.layer_types == (F, S)


def test_load_config_errors(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="no config.json"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_config(tmp_path)


def test_mellum_moe_checkpoint_is_refused_naming_the_field(tmp_path) -> None:
    """A Mellum checkpoint with one MoE layer (transformers builds and saves it fine) is refused before
    any weight is read, and the error names the field and the layer."""
    path = write_checkpoint(
        "mellum",
        tmp_path / "moe",
        seed=3,
        mlp_layer_types=["dense", "sparse", "dense", "dense"],
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
    )
    with pytest.raises(CheckpointError, match=r"mlp_layer_types marks layer\(s\) \[1\] 'sparse' \(MoE\)"):
        load_model(path)
