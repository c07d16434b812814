"""Model config parsed from an HF `config.json`, normalised across architectures.

Defaults and derived fields mirror transformers' own config classes (5.x) field by
field, so a config.json that omits a key means the same thing here as there; the
tests compare against `transformers.AutoConfig` for that reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.model.errors import CheckpointError

SLIDING = "sliding_attention"
FULL = "full_attention"
_LEGACY_LAYER_TYPES = {"attention": FULL}  # transformers' _LEGACY_LAYER_TYPE_REMAP

SUPPORTED_MODEL_TYPES = ("gemma2", "gemma3_text", "qwen3", "mellum")
SUPPORTED_ACTIVATIONS = ("gelu_pytorch_tanh", "gelu", "silu", "swish")
SUPPORTED_ROPE_TYPES = ("default", "linear")

# transformers 5.x class defaults (Gemma2Config, Gemma3TextConfig, Qwen3Config, MellumConfig).
_DEFAULTS: dict[str, dict[str, Any]] = {
    "gemma2": dict(
        vocab_size=256000,
        hidden_size=2304,
        intermediate_size=9216,
        num_hidden_layers=26,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=8192,
        rms_norm_eps=1e-6,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        tie_word_embeddings=True,
        attention_bias=False,
        query_pre_attn_scalar=256,
        sliding_window=4096,
        final_logit_softcapping=30.0,
        attn_logit_softcapping=50.0,
        rope_theta=10_000.0,
    ),
    "gemma3_text": dict(
        vocab_size=262_208,
        hidden_size=2304,
        intermediate_size=9216,
        num_hidden_layers=26,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
        hidden_activation="gelu_pytorch_tanh",
        max_position_embeddings=131_072,
        rms_norm_eps=1e-6,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        tie_word_embeddings=True,
        attention_bias=False,
        query_pre_attn_scalar=256,
        sliding_window=4096,
        final_logit_softcapping=None,
        sliding_window_pattern=6,
        rope_theta=1_000_000.0,
        rope_local_base_freq=10_000.0,
    ),
    "qwen3": dict(
        vocab_size=151936,
        hidden_size=4096,
        intermediate_size=22016,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        head_dim=128,
        hidden_act="silu",
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        pad_token_id=None,
        eos_token_id=None,
        bos_token_id=None,
        tie_word_embeddings=False,
        attention_bias=False,
        use_sliding_window=False,
        sliding_window=4096,
        max_window_layers=28,
        rope_theta=10_000.0,
    ),
    # layer_types defaults to all full attention, mlp_layer_types to all "sparse" (MoE), and
    # rope_parameters to {full: 500000, sliding: 10000} (MellumConfig.__post_init__).
    "mellum": dict(
        vocab_size=98304,
        hidden_size=2304,
        intermediate_size=7168,
        num_hidden_layers=28,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        hidden_act="silu",
        max_position_embeddings=131072,
        rms_norm_eps=1e-6,
        pad_token_id=None,
        eos_token_id=None,
        bos_token_id=None,
        tie_word_embeddings=False,
        attention_bias=False,
        sliding_window=1024,
    ),
}
_MELLUM_DEFAULT_ROPE = {
    FULL: {"rope_type": "default", "rope_theta": 500_000.0},
    SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
}


@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding for one layer type: ``inv_freq = theta^(-2i/d) / factor``."""

    theta: float
    rope_type: str = "default"
    factor: float = 1.0  # "linear" scaling divides inv_freq by this


@dataclass(frozen=True)
class HybridModelConfig:
    """Everything the model math needs, with per-architecture quirks made explicit.

    `layer_types[i]` is "sliding_attention" or "full_attention"; sliding layers see
    `sliding_window` tokens (see `harness.model.window.window_start`).
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    layer_types: tuple[str, ...]
    sliding_window: int | None
    max_position_embeddings: int
    rms_norm_eps: float
    hidden_act: str
    attention_bias: bool
    tie_word_embeddings: bool
    attn_scaling: float  # multiplies q·k
    attn_logit_softcap: float | None
    final_logit_softcap: float | None
    rope_full: RopeConfig
    rope_sliding: RopeConfig
    gemma_norm: bool  # RMSNorm scales by (1 + w) in fp32 (Gemma) instead of w (Qwen/Llama)
    sandwich_norm: bool  # extra post-attention and pre/post-feedforward norms (Gemma)
    qk_norm: bool  # per-head RMSNorm on q and k before RoPE
    embed_scale: float  # token embeddings are multiplied by this (sqrt(hidden) for Gemma)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    is_hybrid_swa: bool = False  # opt-in flag some checkpoints carry; informational only

    # ---- layer-type queries -------------------------------------------------
    def is_sliding(self, layer_id: int) -> bool:
        return self.layer_types[layer_id] == SLIDING

    @property
    def sliding_layer_ids(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == SLIDING)

    @property
    def full_layer_ids(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.layer_types) if t == FULL)

    @property
    def swa_window(self) -> int | None:
        """The window the SWA pool and the scheduler's eviction are sized for; None when no layer slides."""
        return self.sliding_window if self.sliding_layer_ids else None

    def layer_window(self, layer_id: int) -> int | None:
        """Sliding window of `layer_id`, or None for a full-attention layer."""
        return self.sliding_window if self.is_sliding(layer_id) else None

    def rope_for(self, layer_id: int) -> RopeConfig:
        return self.rope_sliding if self.is_sliding(layer_id) else self.rope_full

    # ---- parsing ------------------------------------------------------------
    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> HybridModelConfig:
        """Parse an HF config dict (the content of config.json)."""
        model_type = hf.get("model_type")
        if model_type not in _DEFAULTS:
            raise CheckpointError(
                f"unsupported model_type {model_type!r} (architectures={hf.get('architectures')}); "
                f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        return _PARSERS[model_type](_Fields(model_type, hf))


def load_config(path: str | Path) -> HybridModelConfig:
    """Read `config.json` (path may be the checkpoint dir or the file itself)."""
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    try:
        hf = json.loads(file.read_text())
    except FileNotFoundError as e:
        raise CheckpointError(f"no config.json at {file}") from e
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{file} is not valid JSON: {e}") from e
    return HybridModelConfig.from_hf(hf)


class _Fields:
    """config.json values with the architecture's transformers defaults behind them."""

    def __init__(self, model_type: str, hf: dict[str, Any]):
        self.model_type, self.hf, self.defaults = model_type, hf, _DEFAULTS[model_type]

    def __getitem__(self, key: str) -> Any:
        return self.hf[key] if key in self.hf else self.defaults.get(key)


def _common(f: _Fields, layer_types: list[str], sliding_window: int | None, act_key: str) -> dict[str, Any]:
    """Fields shared by all architectures, validated."""
    if f.hf.get("use_bidirectional_attention"):
        raise CheckpointError(f"{f.model_type}: use_bidirectional_attention=True is not supported")
    n_layers = int(f["num_hidden_layers"])
    heads = int(f["num_attention_heads"])
    kv_heads = f["num_key_value_heads"]
    kv_heads = heads if kv_heads is None else int(kv_heads)
    head_dim = f["head_dim"] or f["hidden_size"] // heads
    if head_dim % 2:
        raise CheckpointError(f"{f.model_type}: head_dim={head_dim} must be even for rotary embeddings")
    if heads % kv_heads:
        raise CheckpointError(f"num_attention_heads={heads} not a multiple of num_key_value_heads={kv_heads}")

    types = tuple(_LEGACY_LAYER_TYPES.get(t, t) for t in layer_types)
    bad = sorted({t for t in types if t not in (SLIDING, FULL)})
    if bad:
        raise CheckpointError(f"{f.model_type}: unsupported layer_types entries {bad}")
    if len(types) != n_layers:
        raise CheckpointError(f"{f.model_type}: layer_types has {len(types)} entries but num_hidden_layers={n_layers}")
    if SLIDING in types and sliding_window is None:
        raise CheckpointError(
            f"{f.model_type}: layer_types has sliding layers but no sliding_window is set"
            + (" (qwen3 ignores sliding_window unless use_sliding_window=true)" if f.model_type == "qwen3" else "")
        )
    if sliding_window is not None and int(sliding_window) < 1:
        raise CheckpointError(f"{f.model_type}: sliding_window must be >= 1, got {sliding_window}")

    act = f[act_key]
    if act not in SUPPORTED_ACTIVATIONS:
        raise CheckpointError(f"{f.model_type}: unsupported activation {act!r}; supported: {SUPPORTED_ACTIVATIONS}")
    eos = f["eos_token_id"]
    eos_ids = () if eos is None else tuple(int(e) for e in (eos if isinstance(eos, list) else [eos]))
    return dict(
        model_type=f.model_type,
        vocab_size=int(f["vocab_size"]),
        hidden_size=int(f["hidden_size"]),
        intermediate_size=int(f["intermediate_size"]),
        num_hidden_layers=n_layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=int(head_dim),
        layer_types=types,
        sliding_window=None if sliding_window is None else int(sliding_window),
        max_position_embeddings=int(f["max_position_embeddings"]),
        rms_norm_eps=float(f["rms_norm_eps"]),
        hidden_act=act,
        attention_bias=bool(f["attention_bias"]),
        tie_word_embeddings=bool(f["tie_word_embeddings"]),
        bos_token_id=f["bos_token_id"],
        eos_token_ids=eos_ids,
        pad_token_id=f["pad_token_id"],
        is_hybrid_swa=bool(f.hf.get("is_hybrid_swa", False)),
    )


def _rope(params: dict[str, Any] | None, where: str) -> RopeConfig:
    params = dict(params or {})
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise CheckpointError(f"unsupported rope_type {rope_type!r} for {where}; supported: {SUPPORTED_ROPE_TYPES}")
    factor = float(params["factor"]) if rope_type == "linear" else 1.0
    return RopeConfig(theta=float(params["rope_theta"]), rope_type=rope_type, factor=factor)


def _flat_or_nested_rope(f: _Fields) -> tuple[RopeConfig, RopeConfig]:
    """Gemma2/Qwen3: one rope dict for all layers (or, rarely, one per layer type)."""
    params = f.hf.get("rope_scaling") or f.hf.get("rope_parameters") or {}
    theta = f["rope_theta"]
    if FULL in params or SLIDING in params:
        full = {"rope_theta": theta, **(params.get(FULL) or {})}
        sliding = {"rope_theta": theta, **(params.get(SLIDING) or {})}
        return _rope(full, FULL), _rope(sliding, SLIDING)
    rope = _rope({"rope_theta": theta, **params}, "all layers")
    return rope, rope


def _parse_gemma2(f: _Fields) -> HybridModelConfig:
    n = int(f["num_hidden_layers"])
    # Gemma2Config.__post_init__: even layers slide, odd layers are global.
    layer_types = f.hf.get("layer_types")
    if layer_types is None:
        layer_types = [SLIDING if (i + 1) % 2 else FULL for i in range(n)]
    common = _common(f, layer_types, f["sliding_window"], "hidden_activation")
    rope_full, rope_sliding = _flat_or_nested_rope(f)
    return HybridModelConfig(
        **common,
        attn_scaling=float(f["query_pre_attn_scalar"]) ** -0.5,
        attn_logit_softcap=_cap(f["attn_logit_softcapping"]),
        final_logit_softcap=_cap(f["final_logit_softcapping"]),
        rope_full=rope_full,
        rope_sliding=rope_sliding,
        gemma_norm=True,
        sandwich_norm=True,
        qk_norm=False,
        embed_scale=common["hidden_size"] ** 0.5,
    )


def _parse_gemma3_text(f: _Fields) -> HybridModelConfig:
    n = int(f["num_hidden_layers"])
    pattern = int(f["sliding_window_pattern"])  # legacy int; transformers default 6 (5 local : 1 global)
    layer_types = f.hf.get("layer_types")
    if layer_types is None:
        layer_types = [SLIDING if (i + 1) % pattern else FULL for i in range(n)]
    common = _common(f, layer_types, f["sliding_window"], "hidden_activation")

    # Gemma3TextConfig.convert_rope_params_to_dict: nested per layer type; legacy
    # `rope_scaling` applies to global layers, `rope_theta` is the global base and
    # `rope_local_base_freq` the local one.
    params = {k: dict(v) for k, v in (f.hf.get("rope_parameters") or {}).items() if isinstance(v, dict)}
    full = params.get(FULL) or {"rope_type": "default"}
    if f.hf.get("rope_scaling"):
        full.update(f.hf["rope_scaling"])
    full.setdefault("rope_theta", f["rope_theta"])
    sliding = params.get(SLIDING) or {"rope_type": "default"}
    sliding.setdefault("rope_theta", f["rope_local_base_freq"])

    return HybridModelConfig(
        **common,
        attn_scaling=float(f["query_pre_attn_scalar"]) ** -0.5,
        # transformers' Gemma3Attention never passes attn_logit_softcapping to its
        # attention function, so the field has no effect there (and is null in
        # released configs): follow transformers and ignore it.
        attn_logit_softcap=None,
        final_logit_softcap=_cap(f["final_logit_softcapping"]),
        rope_full=_rope(full, FULL),
        rope_sliding=_rope(sliding, SLIDING),
        gemma_norm=True,
        sandwich_norm=True,
        qk_norm=True,
        embed_scale=common["hidden_size"] ** 0.5,
    )


def _qwen_style(common: dict[str, Any], rope_full: RopeConfig, rope_sliding: RopeConfig) -> HybridModelConfig:
    """Qwen3's block, shared by Mellum: q/k norm, plain RMSNorm, 1/sqrt(head_dim), no soft-caps, no embed scale."""
    return HybridModelConfig(
        **common,
        attn_scaling=float(common["head_dim"]) ** -0.5,
        attn_logit_softcap=None,
        final_logit_softcap=None,
        rope_full=rope_full,
        rope_sliding=rope_sliding,
        gemma_norm=False,
        sandwich_norm=False,
        qk_norm=True,
        embed_scale=1.0,
    )


def _parse_qwen3(f: _Fields) -> HybridModelConfig:
    n = int(f["num_hidden_layers"])
    # Qwen3Config.__post_init__: the window exists only with use_sliding_window, and
    # by default layers >= max_window_layers slide.
    sliding_window = f["sliding_window"] if f["use_sliding_window"] else None
    max_window_layers = int(f["max_window_layers"])
    layer_types = f.hf.get("layer_types")
    if layer_types is None:
        layer_types = [SLIDING if sliding_window is not None and i >= max_window_layers else FULL for i in range(n)]
    common = _common(f, layer_types, sliding_window, "hidden_act")
    rope_full, rope_sliding = _flat_or_nested_rope(f)
    return _qwen_style(common, rope_full, rope_sliding)


def _parse_mellum(f: _Fields) -> HybridModelConfig:
    """Mellum (transformers' MellumForCausalLM, SGLang's ``models/mellum.py``): Qwen3-MoE attention (q/k
    norm, plain RMSNorm, no soft-caps) with per-layer sliding windows, one RoPE per layer type, and a
    dense or MoE MLP per layer. Only all-dense checkpoints are supported."""
    n = int(f["num_hidden_layers"])
    layer_types = f.hf.get("layer_types")
    if layer_types is None:
        layer_types = [FULL] * n  # MellumConfig.__post_init__
    mlp_types = f.hf.get("mlp_layer_types")
    if mlp_types is None:
        raise CheckpointError(
            "mellum: mlp_layer_types is not set, which means every layer is 'sparse' (MoE); only dense MLP "
            "layers are supported: set mlp_layer_types to 'dense' for every layer"
        )
    if len(mlp_types) != n:
        raise CheckpointError(f"mellum: mlp_layer_types has {len(mlp_types)} entries but num_hidden_layers={n}")
    unknown = sorted({t for t in mlp_types if t not in ("dense", "sparse")})
    if unknown:
        raise CheckpointError(f"mellum: unsupported mlp_layer_types entries {unknown}; expected 'dense' or 'sparse'")
    sparse = [i for i, t in enumerate(mlp_types) if t == "sparse"]
    if sparse:
        raise CheckpointError(
            f"mellum: mlp_layer_types marks layer(s) {sparse} 'sparse' (MoE); only dense MLP layers are supported"
        )
    common = _common(f, layer_types, f["sliding_window"], "hidden_act")

    # MellumConfig keeps rope_parameters nested per layer type and has no legacy keys
    # (no rope_theta / rope_scaling fallback): transformers and SGLang both index it by layer type.
    params = f.hf.get("rope_parameters")
    params = _MELLUM_DEFAULT_ROPE if params is None else params
    ropes: dict[str, RopeConfig] = {}
    for layer_type in dict.fromkeys(common["layer_types"]):
        entry = params.get(layer_type)
        if not isinstance(entry, dict):
            raise CheckpointError(
                f"mellum: rope_parameters has no {layer_type!r} entry; it must be nested per layer type "
                f"(got keys {sorted(params)})"
            )
        if "rope_theta" not in entry:
            raise CheckpointError(f"mellum: rope_parameters[{layer_type!r}] has no rope_theta")
        # transformers rotates only head_dim * partial_rotary_factor dims; SGLang's Mellum rotates all of them.
        if float(entry.get("partial_rotary_factor", 1.0)) != 1.0:
            raise CheckpointError(
                f"mellum: rope_parameters[{layer_type!r}].partial_rotary_factor="
                f"{entry['partial_rotary_factor']} is not supported (only 1.0)"
            )
        ropes[layer_type] = _rope(entry, layer_type)
    rope_full = ropes.get(FULL) or ropes[SLIDING]  # a layer type no layer uses: never read
    rope_sliding = ropes.get(SLIDING) or rope_full
    return _qwen_style(common, rope_full, rope_sliding)


def _cap(value: Any) -> float | None:
    return None if value is None else float(value)


_PARSERS = {
    "gemma2": _parse_gemma2,
    "gemma3_text": _parse_gemma3_text,
    "qwen3": _parse_qwen3,
    "mellum": _parse_mellum,
}
