"""SGLang: the CPU attention backend drops the attention logit softcap (Gemma 2's ``attn_logit_softcapping``)
(swa-harness docs/FINDINGS.md #16).

SGLang's Gemma 2 model (``sglang/srt/models/gemma2.py``) builds every attention layer with
``RadixAttention(..., logit_cap=config.attn_logit_softcapping)`` (50.0 in every Gemma 2 config), and so does Grok
(``models/grok.py``, 30.0 by default). ``TorchNativeAttnBackend`` (``layers/attention/torch_native_backend.py``), the
backend SGLang's CPU engine uses wherever it has no AMX kernels, never reads ``layer.logit_cap``: both its extend and
its decode call ``torch.nn.functional.scaled_dot_product_attention``, which has no softcap, so the scores reach the
softmax uncapped. transformers (and SGLang's intel_amx backend, which passes ``layer.logit_cap`` to its kernel) apply
``cap * tanh(score / cap)`` first.

Scene: SGLang's own ``MHATokenToKVPool`` (the pool SGLang builds for Gemma 2: one full-size pool, windows by masks), its
``TorchNativeAttnBackend`` over it, and three ``RadixAttention`` layers driven the way its model runner drives them
(``init_forward_metadata``, then ``forward_extend`` / ``forward_decode`` per layer) on handcrafted batches; no model,
no server. Layers: a Gemma-2 sliding layer (window 4 tokens) and a full layer, both with ``logit_cap`` 50, the layers
under test; a full layer without a cap, the control. Two requests prefill 7 and 5 tokens in one extend, then decode one
token each. Queries and keys are drawn so that the scaled scores reach 175 in magnitude (the shipped trained
``gemma2-tiny-swa`` reaches 246 before its cap).

    python finding_16_sglang_torch_native_drops_softcap.py

Needs SGLang and torch, on CPU; a second after the imports. Exit status: 1 while the bug is there, 0 when it is
fixed, 2 when the script could not set the scene up (or the control failed).
"""

from __future__ import annotations

import importlib.machinery
import sys
import traceback
import types
from dataclasses import dataclass

EXIT_FIXED, EXIT_BUG, EXIT_SETUP = 0, 1, 2
SLOTS, HEAD_DIM, SEED = 64, 8, 0
CAP = 50.0  # Gemma 2's attn_logit_softcapping
WINDOW = 3  # SGLang's sliding_window_size: a model window of 4 tokens (models pass config.sliding_window - 1)
SPREAD = 6.0  # q, k ~ N(0, SPREAD^2): scaled scores q.k / sqrt(HEAD_DIM) with a standard deviation of about 36
LENGTHS = (7, 5)
CAPPED_SWA, CAPPED_FULL, UNCAPPED_FULL = 0, 1, 2
TOLERANCE = 1e-4


class SetupProblem(Exception):
    """The scene could not be built on this install, or the control failed: no verdict."""


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


def reference(q, k, v, positions, *, cap: float, window: int | None):
    """Causal attention of queries at ``positions`` over a request's keys (positions 0..n-1), as transformers' Gemma 2
    computes it: scaled scores, then ``cap * tanh(score / cap)`` when ``cap`` > 0, then the mask (keys at most
    ``window`` positions back for a sliding layer), then the softmax."""
    import torch

    key_pos = torch.arange(k.shape[0])
    allowed = key_pos[None, :] <= positions[:, None]
    if window is not None:
        allowed &= key_pos[None, :] >= positions[:, None] - window
    scores = torch.einsum("qhd,khd->hqk", q, k) / HEAD_DIM**0.5
    if cap > 0:
        scores = cap * torch.tanh(scores / cap)
    scores = scores.masked_fill(~allowed[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def reproduce() -> Verdict:
    import torch

    try:
        _stub_torchvision()
        from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
        from sglang.srt.layers.radix_attention import RadixAttention
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
    except (ImportError, AttributeError) as error:
        raise SetupProblem(f"this SGLang lacks what the scene drives: {error}") from error
    pool = MHATokenToKVPool(
        size=SLOTS,
        page_size=1,
        dtype=torch.float32,
        head_num=1,
        head_dim=HEAD_DIM,
        layer_num=3,
        device="cpu",
        enable_memory_saver=False,
    )
    req_to_token = torch.zeros((len(LENGTHS), 32), dtype=torch.int32)
    rows = types.SimpleNamespace(req_to_token=req_to_token)
    backend = TorchNativeAttnBackend(types.SimpleNamespace(device="cpu", req_to_token_pool=rows, token_to_kv_pool=pool))
    scaling = HEAD_DIM**-0.5
    layers = {
        CAPPED_SWA: RadixAttention(1, HEAD_DIM, scaling, 1, CAPPED_SWA, logit_cap=CAP, sliding_window_size=WINDOW),
        CAPPED_FULL: RadixAttention(1, HEAD_DIM, scaling, 1, CAPPED_FULL, logit_cap=CAP),
        UNCAPPED_FULL: RadixAttention(1, HEAD_DIM, scaling, 1, UNCAPPED_FULL),
    }
    generator = torch.Generator().manual_seed(SEED)
    kv: dict[tuple[int, int], tuple] = {}  # (row, layer) -> every key and value the request wrote
    lengths = dict.fromkeys(range(len(LENGTHS)), 0)
    next_slot = [1]  # slot 0 is the padding slot
    worst: dict[tuple[str, int], float] = {}  # (phase, layer) -> worst |output - reference|
    largest_score = [0.0]

    def step(new: tuple[int, ...], phase: str) -> None:
        total = sum(new)
        loc = torch.arange(next_slot[0], next_slot[0] + total, dtype=torch.int64)
        next_slot[0] += total
        prefix, start = [], 0
        for row, n in enumerate(new):
            req_to_token[row, lengths[row] : lengths[row] + n] = loc[start : start + n].to(torch.int32)
            prefix.append(lengths[row])
            lengths[row] += n
            start += n
        batch = types.SimpleNamespace(
            out_cache_loc=loc,
            req_pool_indices=torch.arange(len(new), dtype=torch.int64),
            seq_lens=torch.tensor([lengths[r] for r in range(len(new))], dtype=torch.int64),
            extend_prefix_lens=torch.tensor(prefix, dtype=torch.int64),
            extend_seq_lens=torch.tensor(new, dtype=torch.int64),
            encoder_lens=None,
            encoder_out_cache_loc=None,
            token_to_kv_pool=pool,
            req_to_token_pool=rows,
        )
        backend.init_forward_metadata(batch)
        for layer_id, layer in layers.items():
            q, k, v = (torch.randn((total, 1, HEAD_DIM), generator=generator) * SPREAD for _ in range(3))
            run = backend.forward_decode if phase == "decode" else backend.forward_extend
            out = run(q.view(total, -1), k, v, layer, batch).view(total, 1, HEAD_DIM)
            start = 0
            for row, (n, have) in enumerate(zip(new, prefix)):
                old_k, old_v = kv.get((row, layer_id), (k[:0], v[:0]))
                all_k, all_v = torch.cat([old_k, k[start : start + n]]), torch.cat([old_v, v[start : start + n]])
                kv[(row, layer_id)] = (all_k, all_v)
                window = WINDOW if layer.sliding_window_size > -1 else None
                want = reference(
                    q[start : start + n], all_k, all_v, torch.arange(have, have + n), cap=layer.logit_cap, window=window
                )
                diff = float((out[start : start + n] - want).abs().max())
                worst[(phase, layer_id)] = max(worst.get((phase, layer_id), 0.0), diff)
                scores = torch.einsum("qhd,khd->hqk", q[start : start + n], all_k) * scaling
                largest_score[0] = max(largest_score[0], float(scores.abs().max()))
                start += n

    step(LENGTHS, "extend")
    step((1,) * len(LENGTHS), "decode")
    control = max(worst[("extend", UNCAPPED_FULL)], worst[("decode", UNCAPPED_FULL)])
    if control > TOLERANCE:
        raise SetupProblem(f"control failed: the layer without a cap disagrees with its reference by {control:.3g}")
    scene = (
        f"logit_cap {CAP}, scaled scores up to {largest_score[0]:.0f}, sequences of {list(LENGTHS)} tokens then one "
        f"decode each (control: the layer without a cap agrees within {control:.1g})"
    )
    bad = {key: diff for key, diff in worst.items() if key[1] != UNCAPPED_FULL and diff > TOLERANCE}
    if bad:
        names = {CAPPED_SWA: "sliding", CAPPED_FULL: "full"}
        said = ", ".join(f"{names[layer]} {phase} {diff:.3g}" for (phase, layer), diff in sorted(bad.items()))
        return Verdict(True, f"{scene}: worst |output - softcapped attention|: {said}: the cap is not applied")
    return Verdict(False, f"{scene}: every output equals softcapped attention")


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
