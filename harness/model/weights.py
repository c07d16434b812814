"""Strict safetensors loading: HF tensor names -> fused model parameters.

Every tensor the architecture needs must be present with the right shape, and
every tensor present must be used (or be one transformers itself ignores).
Anything else is a `CheckpointError` naming the tensor: a harness that loads a
checkpoint approximately would compare engines against the wrong model.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors import safe_open

from harness.model.config import HybridModelConfig, load_config
from harness.model.errors import CheckpointError
from harness.model.model import HybridSWAForCausalLM

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_LIST_LIMIT = 8  # names shown per error message


def expected_tensors(config: HybridModelConfig) -> dict[str, tuple[int, ...]]:
    """HF tensor name -> shape that `config` requires (transformers' naming)."""
    c = config
    hid, d = c.hidden_size, c.head_dim
    q_out, kv_out = c.num_attention_heads * d, c.num_key_value_heads * d
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (c.vocab_size, hid)}
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (q_out, hid),
            p + "self_attn.k_proj.weight": (kv_out, hid),
            p + "self_attn.v_proj.weight": (kv_out, hid),
            p + "self_attn.o_proj.weight": (hid, q_out),
            p + "mlp.gate_proj.weight": (c.intermediate_size, hid),
            p + "mlp.up_proj.weight": (c.intermediate_size, hid),
            p + "mlp.down_proj.weight": (hid, c.intermediate_size),
            p + "input_layernorm.weight": (hid,),
            p + "post_attention_layernorm.weight": (hid,),
        }
        if c.attention_bias:
            shapes |= {
                p + "self_attn.q_proj.bias": (q_out,),
                p + "self_attn.k_proj.bias": (kv_out,),
                p + "self_attn.v_proj.bias": (kv_out,),
                p + "self_attn.o_proj.bias": (hid,),
            }
        if c.qk_norm:
            shapes |= {p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,)}
        if c.sandwich_norm:
            shapes |= {p + "pre_feedforward_layernorm.weight": (hid,), p + "post_feedforward_layernorm.weight": (hid,)}
    shapes["model.norm.weight"] = (hid,)
    if not c.tie_word_embeddings:
        shapes["lm_head.weight"] = (c.vocab_size, hid)
    return shapes


TIED_HEAD = "lm_head.weight"


def ignored_by_transformers(name: str, config: HybridModelConfig) -> bool:
    """Tensors that may be present but are not used.

    * ``lm_head.weight`` with tied embeddings, *if* it equals
      ``model.embed_tokens.weight`` (checked in `read_tensors`): transformers then
      ties the two and the copy is redundant. If it differs, transformers 5 unties
      and uses it while SGLang skips it, so such a checkpoint is rejected.
    * ``*.rotary_emb.inv_freq``: a non-persistent buffer older exports wrote out;
      it is recomputed from the config.
    """
    if name == TIED_HEAD:
        return config.tie_word_embeddings
    return name.endswith("rotary_emb.inv_freq")


def checkpoint_files(path: Path) -> list[Path]:
    """The safetensors file(s) of a checkpoint dir (single file or sharded index)."""
    if (path / SINGLE_FILE).is_file():
        return [path / SINGLE_FILE]
    if (path / INDEX_FILE).is_file():
        weight_map = json.loads((path / INDEX_FILE).read_text()).get("weight_map", {})
        files = [path / f for f in dict.fromkeys(weight_map.values())]
        missing = [str(f) for f in files if not f.is_file()]
        if missing:
            raise CheckpointError(f"{INDEX_FILE} names shard(s) that do not exist: {missing}")
        return files
    others = sorted(p.name for p in path.glob("*.bin")) + sorted(p.name for p in path.glob("*.pt"))
    hint = f" (found {others}: only safetensors is supported)" if others else ""
    raise CheckpointError(f"no {SINGLE_FILE} or {INDEX_FILE} in {path}{hint}")


def read_tensors(files: Iterable[Path], config: HybridModelConfig) -> dict[str, torch.Tensor]:
    """Validate names and shapes from the headers, then read the tensors."""
    expected = expected_tensors(config)
    located: dict[str, Path] = {}
    found_shapes: dict[str, tuple[int, ...]] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                if name in located:
                    raise CheckpointError(f"tensor {name!r} appears in both {located[name].name} and {file.name}")
                located[name] = file
                found_shapes[name] = tuple(f.get_slice(name).get_shape())

    missing = [n for n in expected if n not in found_shapes]
    if missing:
        raise CheckpointError(
            f"checkpoint is missing {len(missing)} tensor(s) required by {config.model_type}: "
            + _listing((n, f"expected shape {expected[n]}") for n in missing)
        )
    unexpected = [n for n in found_shapes if n not in expected and not ignored_by_transformers(n, config)]
    if unexpected:
        raise CheckpointError(
            f"checkpoint has {len(unexpected)} unexpected tensor(s) for {config.model_type}: "
            + _listing((n, f"shape {found_shapes[n]}") for n in unexpected)
        )
    wrong = [n for n in expected if found_shapes[n] != expected[n]]
    if wrong:
        raise CheckpointError(
            f"checkpoint has {len(wrong)} tensor(s) with the wrong shape: "
            + _listing((n, f"expected shape {expected[n]}, found {found_shapes[n]}") for n in wrong)
        )

    wanted = list(expected)
    tied_copy = config.tie_word_embeddings and TIED_HEAD in found_shapes
    if tied_copy:
        wanted.append(TIED_HEAD)
    tensors: dict[str, torch.Tensor] = {}
    for file in dict.fromkeys(located[n] for n in wanted):
        with safe_open(str(file), framework="pt") as f:
            for name in wanted:
                if located[name] == file:
                    t = f.get_tensor(name)
                    if not t.is_floating_point():
                        raise CheckpointError(f"tensor {name!r} has dtype {t.dtype}; expected a float dtype")
                    tensors[name] = t
    if tied_copy:
        head, embed = tensors.pop(TIED_HEAD), tensors["model.embed_tokens.weight"]
        if head.shape != embed.shape or not torch.equal(head, embed.to(head.dtype)):
            raise CheckpointError(
                f"tie_word_embeddings=true but the checkpoint's {TIED_HEAD} (shape {tuple(head.shape)}) differs "
                f"from model.embed_tokens.weight (shape {tuple(embed.shape)}): transformers would untie and use "
                "it, SGLang would ignore it; fix the checkpoint or set tie_word_embeddings=false"
            )
    return tensors


def fuse(tensors: dict[str, torch.Tensor], config: HybridModelConfig, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """HF tensors -> `HybridSWAForCausalLM` state dict (fused, cast, norm scales prepared)."""
    c = config

    def w(name: str) -> torch.Tensor:
        return tensors[name].to(dtype)

    def norm(name: str, heads: int | None = None) -> torch.Tensor:
        # Gemma: (1 + w) in fp32 of the dtype-rounded weight; plain: w in the model dtype.
        scale = w(name).float() + 1.0 if c.gemma_norm else w(name)
        return scale if heads is None else scale.expand(heads, -1)

    state = {"embed": w("model.embed_tokens.weight"), "norm.scale": norm("model.norm.weight")}
    if not c.tie_word_embeddings:
        state["lm_head"] = w("lm_head.weight")
    for i in range(c.num_hidden_layers):
        hf, ours = f"model.layers.{i}.", f"layers.{i}."
        att = hf + "self_attn."
        state[ours + "attn.qkv"] = torch.cat([w(att + f"{x}_proj.weight") for x in "qkv"])
        state[ours + "attn.o"] = w(att + "o_proj.weight")
        if c.attention_bias:
            state[ours + "attn.qkv_bias"] = torch.cat([w(att + f"{x}_proj.bias") for x in "qkv"])
            state[ours + "attn.o_bias"] = w(att + "o_proj.bias")
        if c.qk_norm:
            state[ours + "attn.qk_norm.scale"] = torch.cat(
                [
                    norm(att + "q_norm.weight", c.num_attention_heads),
                    norm(att + "k_norm.weight", c.num_key_value_heads),
                ]
            )
        state[ours + "mlp.gate_up"] = torch.cat([w(hf + "mlp.gate_proj.weight"), w(hf + "mlp.up_proj.weight")])
        state[ours + "mlp.down"] = w(hf + "mlp.down_proj.weight")
        state[ours + "input_norm.scale"] = norm(hf + "input_layernorm.weight")
        if c.sandwich_norm:
            state[ours + "post_attn_norm.scale"] = norm(hf + "post_attention_layernorm.weight")
            state[ours + "pre_mlp_norm.scale"] = norm(hf + "pre_feedforward_layernorm.weight")
            state[ours + "post_mlp_norm.scale"] = norm(hf + "post_feedforward_layernorm.weight")
        else:
            state[ours + "pre_mlp_norm.scale"] = norm(hf + "post_attention_layernorm.weight")
    return state


def load_model(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    config: HybridModelConfig | None = None,
    max_positions: int | None = None,
) -> HybridSWAForCausalLM:
    """Load an HF checkpoint directory (config.json + safetensors) for inference.

    `config` overrides the parsed config.json (e.g. a different sliding window in
    tests); `max_positions` caps the RoPE tables (default: max_position_embeddings).
    """
    path = Path(path)
    config = config or load_config(path)
    tensors = read_tensors(checkpoint_files(path), config)
    model = HybridSWAForCausalLM(config, dtype=dtype, device=device, max_positions=max_positions)
    with torch.no_grad():
        model.load_state_dict(fuse(tensors, config, dtype), strict=True)
    return model.eval()


def _listing(items: Iterable[tuple[str, str]]) -> str:
    items = list(items)
    shown = "; ".join(f"{name} ({what})" for name, what in items[:_LIST_LIMIT])
    return shown + (f"; ... and {len(items) - _LIST_LIMIT} more" if len(items) > _LIST_LIMIT else "")
