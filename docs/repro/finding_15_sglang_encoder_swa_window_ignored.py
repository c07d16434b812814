"""SGLang: the CPU attention backend ignores the sliding window of encoder-only (bidirectional) layers
(swa-harness docs/FINDINGS.md #15).

``TorchNativeAttnBackend.forward_extend`` (``sglang/srt/layers/attention/torch_native_backend.py``) passes a layer's
``sliding_window_size`` to ``_run_sdpa_forward_extend`` only when ``causal`` is true, and ``causal`` is false for an
``AttentionType.ENCODER_ONLY`` layer. A bidirectional sliding-window layer therefore attends to every token of the
sequence. SGLang's own model ``EmbeddingGemma2Model`` (``models/embedding_gemma2.py``: sliding layers with
``sliding_window_size=512`` and ``attn_type=ENCODER_ONLY``, "each token attends to all tokens within distance <= 512
both backward and forward") gets full attention in its sliding layers on CPU for any input longer than 513 tokens;
the FlashAttention backend gives the same layer the window ``(512, 512)``.

Scene: SGLang's own ``SWAKVPool`` and ``SWATokenToKVPoolAllocator`` (the pool SGLang builds for EmbeddingGemma2, a
hybrid-SWA architecture), its ``TorchNativeAttnBackend`` over them, and three ``RadixAttention`` layers driven the way
its model runner drives them (``init_forward_metadata``, then ``forward_extend`` per layer) on one handcrafted extend
batch of two sequences; no model, no server. The pool is fresh, so full and SWA slot ids agree (finding #4 cannot
play). Layers: an encoder-only sliding layer (``sliding_window_size`` 2), the one under test; an encoder-only full
layer and a causal (decoder) sliding layer, the controls.

    python finding_15_sglang_encoder_swa_window_ignored.py

Needs SGLang and torch, on CPU; a second after the imports. Exit status: 1 while the bug is there, 0 when it is
fixed, 2 when the script could not set the scene up (or a control failed).
"""

from __future__ import annotations

import importlib.machinery
import inspect
import sys
import traceback
import types
from dataclasses import dataclass

EXIT_FIXED, EXIT_BUG, EXIT_SETUP = 0, 1, 2
SLOTS, WINDOW, HEAD_DIM, SEED = 64, 2, 8, 0  # WINDOW: the layer's sliding_window_size
LENGTHS = (9, 6)  # two sequences in one extend batch, each longer than 2 * WINDOW + 1
ENCODER_SWA, ENCODER_FULL, DECODER_SWA = 0, 1, 2
TOLERANCE = 1e-5


class SetupProblem(Exception):
    """The scene could not be built on this install, or a control failed: no verdict."""


@dataclass(frozen=True)
class Verdict:
    bug_present: bool
    message: str


def _stub_torchvision() -> None:
    """SGLang's config modules import torchvision at module level and never call it here; where it is absent or does
    not load beside a CPU-only torch, stand-ins with the imported names keep the import going (transformers is told
    first that torchvision is unavailable, so it never uses them)."""
    import enum

    try:
        import torchvision  # noqa: F401

        return
    except Exception:  # noqa: BLE001
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()

    def stub(name: str, **attrs: object) -> None:
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        module.__path__ = []
        module.__dict__.update(attrs)
        sys.modules[name] = module

    class InterpolationMode(enum.Enum):
        NEAREST = "nearest"
        BILINEAR = "bilinear"
        BICUBIC = "bicubic"

    def unavailable(*_args: object, **_kwargs: object) -> None:
        raise NotImplementedError("torchvision stand-in of the reproducer script")

    stub("torchvision")
    stub("torchvision.transforms", InterpolationMode=InterpolationMode)
    stub("torchvision.transforms.functional", InterpolationMode=InterpolationMode)
    stub("torchvision.io", decode_jpeg=unavailable)


def reference(q, k, v, *, causal: bool, window: int | None):
    """Attention of a sequence's queries over its own keys (positions 0..n-1). ``window``: keys at most that many
    positions away, back only (causal) or both ways (bidirectional: ``|q_pos - k_pos| <= window``, the window
    FlashAttention's backend gives an encoder-only layer, ``(window, window)``)."""
    import torch

    pos = torch.arange(q.shape[0])
    allowed = torch.ones((q.shape[0], k.shape[0]), dtype=torch.bool)
    if causal:
        allowed &= pos[None, :] <= pos[:, None]
    if window is not None:
        allowed &= (pos[:, None] - pos[None, :]).abs() <= window
    scores = torch.einsum("qhd,khd->hqk", q, k) / HEAD_DIM**0.5
    scores = scores.masked_fill(~allowed[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def reproduce() -> Verdict:
    import torch

    try:
        _stub_torchvision()
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
        from sglang.srt.layers.radix_attention import AttentionType, RadixAttention
        from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    except (ImportError, AttributeError) as error:
        raise SetupProblem(f"this SGLang lacks what the scene drives: {error}") from error
    extra = {}
    if "enable_kvcache_transpose" in inspect.signature(SWAKVPool.__init__).parameters:
        extra["enable_kvcache_transpose"] = False
    pool = SWAKVPool(
        size=SLOTS,
        size_swa=SLOTS,
        page_size=1,
        dtype=torch.float32,
        head_num=1,
        head_dim=HEAD_DIM,
        swa_attention_layer_ids=[ENCODER_SWA, DECODER_SWA],
        full_attention_layer_ids=[ENCODER_FULL],
        device="cpu",
        **extra,
    )
    allocator = SWATokenToKVPoolAllocator(SLOTS, SLOTS, 1, torch.float32, "cpu", pool, need_sort=False)
    req_to_token = torch.zeros((len(LENGTHS), 32), dtype=torch.int32)
    rows = types.SimpleNamespace(req_to_token=req_to_token)
    backend = TorchNativeAttnBackend(types.SimpleNamespace(device="cpu", req_to_token_pool=rows, token_to_kv_pool=pool))
    scaling = HEAD_DIM**-0.5
    layers = {
        ENCODER_SWA: RadixAttention(
            1, HEAD_DIM, scaling, 1, ENCODER_SWA, sliding_window_size=WINDOW, attn_type=AttentionType.ENCODER_ONLY
        ),
        ENCODER_FULL: RadixAttention(1, HEAD_DIM, scaling, 1, ENCODER_FULL, attn_type=AttentionType.ENCODER_ONLY),
        DECODER_SWA: RadixAttention(1, HEAD_DIM, scaling, 1, DECODER_SWA, sliding_window_size=WINDOW),
    }
    total = sum(LENGTHS)
    loc = allocator.alloc(total)
    if loc is None:
        raise SetupProblem(f"the allocator refused {total} slots")
    if not torch.equal(allocator.translate_loc_from_full_to_swa(loc), loc):
        raise SetupProblem("a fresh pool handed out different full and SWA ids")
    start = 0
    for row, n in enumerate(LENGTHS):
        req_to_token[row, :n] = loc[start : start + n].to(torch.int32)
        start += n
    batch = types.SimpleNamespace(
        out_cache_loc=loc,
        req_pool_indices=torch.arange(len(LENGTHS), dtype=torch.int64),
        seq_lens=torch.tensor(LENGTHS, dtype=torch.int64),
        extend_prefix_lens=torch.zeros(len(LENGTHS), dtype=torch.int64),
        extend_seq_lens=torch.tensor(LENGTHS, dtype=torch.int64),
        encoder_lens=None,
        encoder_out_cache_loc=None,
        token_to_kv_pool=pool,
        req_to_token_pool=rows,
    )
    backend.init_forward_metadata(batch)
    generator = torch.Generator().manual_seed(SEED)
    # per layer: worst |output - reference| against the layer's own mask, and against no window at all
    worst: dict[int, tuple[float, float]] = {}
    for layer_id, layer in layers.items():
        q, k, v = (torch.randn((total, 1, HEAD_DIM), generator=generator) for _ in range(3))
        out = backend.forward_extend(q.view(total, -1), k, v, layer, batch).view(total, 1, HEAD_DIM)
        causal = layer.attn_type != AttentionType.ENCODER_ONLY
        window = WINDOW if layer.sliding_window_size > -1 else None
        own, unwindowed, start = 0.0, 0.0, 0
        for n in LENGTHS:
            s = slice(start, start + n)
            own = max(own, float((out[s] - reference(q[s], k[s], v[s], causal=causal, window=window)).abs().max()))
            unwindowed = max(
                unwindowed, float((out[s] - reference(q[s], k[s], v[s], causal=causal, window=None)).abs().max())
            )
            start += n
        worst[layer_id] = (own, unwindowed)
    if worst[ENCODER_FULL][0] > TOLERANCE or worst[DECODER_SWA][0] > TOLERANCE:
        raise SetupProblem(
            "control failed: the encoder-only full layer or the causal sliding layer disagrees with its reference "
            f"(worst {worst[ENCODER_FULL][0]:.3g}, {worst[DECODER_SWA][0]:.3g})"
        )
    own, unwindowed = worst[ENCODER_SWA]
    scene = (
        f"an encoder-only layer with sliding_window_size {WINDOW}, sequences of {list(LENGTHS)} tokens in one "
        f"extend (controls: the encoder-only full layer and the causal sliding layer agree within "
        f"{max(worst[ENCODER_FULL][0], worst[DECODER_SWA][0]):.1g})"
    )
    if own > TOLERANCE:
        how = f"; it equals full bidirectional attention within {unwindowed:.1g}" if unwindowed <= TOLERANCE else ""
        return Verdict(
            True,
            f"{scene}: worst |output - bidirectional window attention| {own:.3g}{how}: the window is ignored",
        )
    return Verdict(False, f"{scene}: every output equals bidirectional window attention (within {own:.1g})")


def main() -> int:
    try:
        verdict = reproduce()
    except SetupProblem as problem:
        print(f"SETUP PROBLEM (no verdict): {problem}")
        return EXIT_SETUP
    except Exception as error:  # noqa: BLE001 - anything else is no verdict either; show it whole
        traceback.print_exc()
        said = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        print(f"SETUP PROBLEM (no verdict): the scene raised {type(error).__name__}: {said} (traceback above)")
        return EXIT_SETUP
    from importlib.metadata import version

    print(f"sglang {version('sglang')}: {'BUG PRESENT' if verdict.bug_present else 'fixed'}: {verdict.message}")
    return EXIT_BUG if verdict.bug_present else EXIT_FIXED


if __name__ == "__main__":
    sys.exit(main())
