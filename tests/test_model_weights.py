"""Strict checkpoint loading: every problem is a CheckpointError that names it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from harness.model import CheckpointError, expected_tensors, load_config, load_model, reference_logits
from fixtures.checkpoints import checkpoint, copy_checkpoint, random_sequences


def _edit(src: Path, dst: Path, edit) -> Path:
    """Copy checkpoint `src` to `dst` and rewrite its tensors with `edit(dict)`."""
    copy_checkpoint(src, dst)
    tensors = load_file(dst / "model.safetensors")
    edit(tensors)
    save_file(tensors, dst / "model.safetensors", metadata={"format": "pt"})
    return dst


@pytest.fixture
def gemma2(tmp_path: Path) -> tuple[Path, Path]:
    return checkpoint("gemma2"), tmp_path / "ckpt"


def test_missing_tensor(gemma2) -> None:
    src, dst = gemma2
    name = "model.layers.1.mlp.up_proj.weight"
    _edit(src, dst, lambda t: t.pop(name))
    with pytest.raises(CheckpointError, match="missing 1 tensor") as err:
        load_model(dst)
    assert name in str(err.value) and "expected shape (96, 64)" in str(err.value)


def test_wrong_shape(gemma2) -> None:
    src, dst = gemma2
    name = "model.layers.2.self_attn.k_proj.weight"
    _edit(src, dst, lambda t: t.__setitem__(name, torch.zeros(24, 64)))
    with pytest.raises(CheckpointError, match="wrong shape") as err:
        load_model(dst)
    assert name in str(err.value)
    assert "expected shape (48, 64), found (24, 64)" in str(err.value)


def test_unexpected_tensor(gemma2) -> None:
    src, dst = gemma2
    name = "model.layers.0.self_attn.bogus.weight"
    _edit(src, dst, lambda t: t.__setitem__(name, torch.zeros(3)))
    with pytest.raises(CheckpointError, match="unexpected") as err:
        load_model(dst)
    assert name in str(err.value) and "(3,)" in str(err.value)


def test_unknown_architecture(gemma2) -> None:
    src, dst = gemma2
    copy_checkpoint(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg["model_type"], cfg["architectures"] = "mistral", ["MistralForCausalLM"]
    (dst / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="unsupported model_type 'mistral'") as err:
        load_model(dst)
    assert "gemma2" in str(err.value) and "qwen3" in str(err.value)


def test_untied_head_is_required(tmp_path: Path) -> None:
    dst = _edit(checkpoint("qwen3"), tmp_path / "ckpt", lambda t: t.pop("lm_head.weight"))
    with pytest.raises(CheckpointError, match="lm_head.weight"):
        load_model(dst)


def test_tied_head_copy_equal_to_embeddings_is_ignored(gemma2) -> None:
    src, dst = gemma2

    def add_head(t: dict) -> None:
        t["lm_head.weight"] = t["model.embed_tokens.weight"].clone()
        t["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(12)  # old exports carry this

    _edit(src, dst, add_head)
    seq = random_sequences([20], seed=7)[0]
    torch.testing.assert_close(
        reference_logits(load_model(dst), [seq])[0], reference_logits(load_model(src), [seq])[0], rtol=0, atol=0
    )


def test_tied_head_that_differs_is_rejected(gemma2) -> None:
    """transformers 5 would silently untie and use it; SGLang would ignore it."""
    src, dst = gemma2
    _edit(src, dst, lambda t: t.__setitem__("lm_head.weight", torch.randn(128, 64)))
    with pytest.raises(CheckpointError, match="tie_word_embeddings=true but the checkpoint's lm_head.weight"):
        load_model(dst)


def test_non_float_tensor(gemma2) -> None:
    src, dst = gemma2
    name = "model.norm.weight"
    _edit(src, dst, lambda t: t.__setitem__(name, torch.zeros(64, dtype=torch.int8)))
    with pytest.raises(CheckpointError, match=name):
        load_model(dst)


def test_sharded_checkpoint_loads_like_single_file(tmp_path: Path) -> None:
    src = checkpoint("qwen3")
    dst = copy_checkpoint(src, tmp_path / "sharded")
    tensors = load_file(dst / "model.safetensors")
    (dst / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for file, part in shards.items():
        save_file({n: tensors[n] for n in part}, dst / file, metadata={"format": "pt"})
    weight_map = {n: file for file, part in shards.items() for n in part}
    (dst / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    seq = random_sequences([15], seed=8)[0]
    torch.testing.assert_close(
        reference_logits(load_model(dst), [seq])[0], reference_logits(load_model(src), [seq])[0], rtol=0, atol=0
    )


def test_no_safetensors(tmp_path: Path) -> None:
    dst = copy_checkpoint(checkpoint("gemma2"), tmp_path / "bin")
    (dst / "model.safetensors").rename(dst / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="only safetensors"):
        load_model(dst)


@pytest.mark.parametrize("arch", ["gemma2", "gemma3_text", "qwen3", "mellum"])
def test_expected_tensors_are_exactly_what_transformers_saves(arch: str) -> None:
    path = checkpoint(arch)
    saved = {n: tuple(t.shape) for n, t in load_file(path / "model.safetensors").items()}
    assert expected_tensors(load_config(path)) == saved


def test_bf16_load_casts_weights() -> None:
    model = load_model(checkpoint("gemma2"), dtype=torch.bfloat16)
    assert model.embed.dtype == torch.bfloat16 and model.layers[0].attn.qkv.dtype == torch.bfloat16
    assert model.norm.scale.dtype == torch.float32  # Gemma norms scale by (1 + w) in fp32
    assert model.embed_scale.dtype == torch.bfloat16 and model.embed_scale.item() == 8.0
    qwen = load_model(checkpoint("qwen3"), dtype=torch.bfloat16)
    assert qwen.norm.scale.dtype == torch.bfloat16  # Qwen norms scale by w in the model dtype
