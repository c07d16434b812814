"""SGLang: the CPU attention backend reads sliding-window layers at full slot ids (swa-harness docs/FINDINGS.md #4).

``TorchNativeAttnBackend`` (``sglang/srt/layers/attention/torch_native_backend.py``) writes a sliding-window layer's
K/V at the token's SWA slots (``KVWriteLoc(out_cache_loc, swa_out_cache_loc)``), but reads them back with
``k_cache[req_to_token[req, :seq_len]]``, where ``k_cache`` is the SWA pool's buffer and ``req_to_token`` holds
full-pool slot ids, never translated. It looks right only while the two allocators hand out the same ids. Once the SWA
pool reuses slots that the window freed, a sliding layer attends to other tokens' keys and values (wrong answers,
HTTP 200), or reads past the SWA buffer's end (``IndexError``).

Scene: SGLang's own ``SWAKVPool`` and ``SWATokenToKVPoolAllocator`` (8 slots each, page size 1), its
``TorchNativeAttnBackend`` over them, one sliding-window layer and one full layer, driven the way its model runner
drives it (``init_forward_metadata``, then ``forward_extend`` / ``forward_decode`` per layer) on tiny handcrafted
batches; no model, no server. The sliding layer's ``sliding_window_size`` is 1: a model window of 2 tokens (SGLang's
models pass ``config.sliding_window - 1``), each query sees itself and the token before.

1. Requests A and B prefill 4 tokens each. The two allocators hand out the same ids: every output must equal
   attention over the request's own keys (a control: it checks this script's reference, not SGLang).
2. A's first two tokens have left its window: their SWA slots go back (``free_swa``, as the scheduler frees them).
   B finishes (``free``). The SWA free list now starts with A's two slots, the full one with B's.
3. Request C prefills 3 tokens and decodes a fourth: its full slots are B's old ones, its SWA slots partly A's.
   The sliding layer's outputs must still equal attention over C's own keys; with the bug they read B's stale K/V.

    python finding_4_sglang_swa_reads_full_slot_ids.py

Needs SGLang and torch, on CPU. Exit status: 1 while the bug is there, 0 when it is fixed, 2 when the script could
not set the scene up (or its control failed).
"""

from __future__ import annotations

import importlib.machinery
import inspect
import sys
import traceback
import types
from dataclasses import dataclass

EXIT_FIXED, EXIT_BUG, EXIT_SETUP = 0, 1, 2
SLOTS, WINDOW, HEAD_DIM, SEED = 8, 1, 8, 0  # WINDOW: SGLang's sliding_window_size
SWA_LAYER, FULL_LAYER = 0, 1
TOLERANCE = 1e-5


class SetupProblem(Exception):
    """The scene could not be built on this install, or its control failed: no verdict."""


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


def reference(q, k, v, positions, window: int | None):
    """Attention of each query over the request's own keys: causal, and for a sliding layer the keys at most
    ``window`` positions back (the window SGLang's torch_native mask keeps: ``q_pos - window <= k_pos <= q_pos``).
    q: [queries, heads, dim] at ``positions``; k, v: [keys, heads, dim] at positions 0..keys-1."""
    import torch

    key_pos = torch.arange(k.shape[0])
    allowed = key_pos[None, :] <= positions[:, None]
    if window is not None:
        allowed &= key_pos[None, :] >= positions[:, None] - window
    scores = torch.einsum("qhd,khd->hqk", q, k) / HEAD_DIM**0.5
    scores = scores.masked_fill(~allowed[None], float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


class Scene:
    """SGLang's pool, allocator and torch_native backend, and the K/V each request wrote (to build references)."""

    def __init__(self) -> None:
        import torch

        try:
            _stub_torchvision()
            from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
            from sglang.srt.layers.radix_attention import RadixAttention
            from sglang.srt.mem_cache import swa_memory_pool
            from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

            try:  # 0.5.13 on
                from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
            except ImportError:
                SWATokenToKVPoolAllocator = swa_memory_pool.SWATokenToKVPoolAllocator
        except (ImportError, AttributeError) as error:
            raise SetupProblem(f"this SGLang lacks what the scene drives: {error}") from error
        self.torch = torch
        extra = {}
        if "enable_kvcache_transpose" in inspect.signature(SWAKVPool.__init__).parameters:
            extra["enable_kvcache_transpose"] = False  # required up to 0.5.15
        self.pool = SWAKVPool(
            size=SLOTS,
            size_swa=SLOTS,
            page_size=1,
            dtype=torch.float32,
            head_num=1,
            head_dim=HEAD_DIM,
            swa_attention_layer_ids=[SWA_LAYER],
            full_attention_layer_ids=[FULL_LAYER],
            device="cpu",
            **extra,
        )
        self.allocator = SWATokenToKVPoolAllocator(SLOTS, SLOTS, 1, torch.float32, "cpu", self.pool, need_sort=False)
        self.req_to_token = torch.zeros((4, 16), dtype=torch.int32)
        self.req_to_token_pool = types.SimpleNamespace(req_to_token=self.req_to_token)
        runner = types.SimpleNamespace(
            device="cpu", req_to_token_pool=self.req_to_token_pool, token_to_kv_pool=self.pool
        )
        self.backend = TorchNativeAttnBackend(runner)
        if not getattr(self.backend, "use_sliding_window_kv_pool", True):
            raise SetupProblem("the backend did not take the pool for a hybrid SWA pool")
        scaling = HEAD_DIM**-0.5
        self.layers = {
            SWA_LAYER: RadixAttention(1, HEAD_DIM, scaling, 1, SWA_LAYER, sliding_window_size=WINDOW),
            FULL_LAYER: RadixAttention(1, HEAD_DIM, scaling, 1, FULL_LAYER),
        }
        self.generator = torch.Generator().manual_seed(SEED)
        self.kv: dict[tuple[int, int], tuple] = {}  # (request row, layer) -> (k, v) of every token so far
        self.lengths: dict[int, int] = {}

    def _random(self, n: int):
        return self.torch.randn((n, 1, HEAD_DIM), generator=self.generator)

    def forward(self, rows: list[int], new: list[int], decode: bool) -> dict[tuple[int, str], float]:
        """One batch: ``new[i]`` tokens for request row ``rows[i]``. Returns the worst |output - reference| per layer
        and mask ("window" for the sliding layer's window, "causal" for none), and raises IndexError if the backend
        reads past a buffer."""
        torch = self.torch
        loc = self.allocator.alloc(sum(new))
        if loc is None:
            raise SetupProblem(f"the allocator refused {sum(new)} slots")
        start, prefix = 0, []
        for row, n in zip(rows, new):
            have = self.lengths.get(row, 0)
            self.req_to_token[row, have : have + n] = loc[start : start + n].to(torch.int32)
            prefix.append(have)
            self.lengths[row] = have + n
            start += n
        batch = types.SimpleNamespace(
            out_cache_loc=loc,
            req_pool_indices=torch.tensor(rows, dtype=torch.int64),
            seq_lens=torch.tensor([self.lengths[r] for r in rows], dtype=torch.int64),
            extend_prefix_lens=torch.tensor(prefix, dtype=torch.int64),
            extend_seq_lens=torch.tensor(new, dtype=torch.int64),
            encoder_lens=None,
            encoder_out_cache_loc=None,
            token_to_kv_pool=self.pool,  # where releases before 0.5.22 take the pools from
            req_to_token_pool=self.req_to_token_pool,
        )
        self.backend.init_forward_metadata(batch)
        worst = {}
        for layer_id, layer in self.layers.items():
            q, k, v = self._random(sum(new)), self._random(sum(new)), self._random(sum(new))
            run = self.backend.forward_decode if decode else self.backend.forward_extend
            out = run(q.view(sum(new), -1), k, v, layer, batch).view(sum(new), 1, HEAD_DIM)
            start, diffs = 0, []
            for row, n, have in zip(rows, new, prefix):
                old_k, old_v = self.kv.get((row, layer_id), (k[:0], v[:0]))
                all_k = torch.cat([old_k, k[start : start + n]])
                all_v = torch.cat([old_v, v[start : start + n]])
                self.kv[(row, layer_id)] = (all_k, all_v)
                masks = {"window": WINDOW, "causal": None} if layer_id == SWA_LAYER else {"causal": None}
                for mask, window in masks.items():
                    want = reference(q[start : start + n], all_k, all_v, torch.arange(have, have + n), window)
                    diffs.append(((layer_id, mask), float((out[start : start + n] - want).abs().max())))
                start += n
            for key, diff in diffs:
                worst[key] = max(worst.get(key, 0.0), diff)
        return worst

    def full_and_swa(self, row: int) -> tuple[list[int], list[int]]:
        full = self.req_to_token[row, : self.lengths[row]].long()
        return full.tolist(), self.allocator.translate_loc_from_full_to_swa(full).tolist()


def reproduce() -> Verdict:
    scene = Scene()
    torch = scene.torch
    a, b, c = 1, 2, 3  # request rows
    control = scene.forward([a, b], [4, 4], decode=False)
    # Which mask the backend applies to the sliding layer, seen while full ids == SWA ids: its window (0.5.22 on), or
    # none (older releases apply no window on torch_native). The check below holds it to that mask: this finding is
    # about where the keys are read, not which ones are masked.
    mask = next((m for m in ("window", "causal") if control[(SWA_LAYER, m)] <= TOLERANCE), None)
    if mask is None or control[(FULL_LAYER, "causal")] > TOLERANCE:
        raise SetupProblem(f"control failed: with full ids == SWA ids the outputs differ from the reference {control}")
    a_full, _ = scene.full_and_swa(a)
    scene.allocator.free_swa(torch.tensor(a_full[:2], dtype=torch.int64))  # A's first tokens left the window
    b_full, _ = scene.full_and_swa(b)
    scene.allocator.free(torch.tensor(b_full, dtype=torch.int64))  # B finished
    try:
        extend = scene.forward([c], [3], decode=False)
        decode = scene.forward([c], [1], decode=True)
    except IndexError as error:
        return Verdict(True, f"the sliding layer read past the SWA pool's buffer: IndexError: {error}")
    full, swa = scene.full_and_swa(c)
    if full == swa:
        raise SetupProblem(f"request C's full and SWA slots are the same ({full}): the scene did not diverge them")
    full_worst = max(extend[(FULL_LAYER, "causal")], decode[(FULL_LAYER, "causal")])
    if full_worst > TOLERANCE:
        raise SetupProblem(f"control failed: the full layer disagrees with the reference ({extend}, {decode})")
    where = f"request C's full slots {full}, SWA slots {swa}" + ("" if mask == "window" else "; no window applied")
    worst = {"extend": extend[(SWA_LAYER, mask)], "decode": decode[(SWA_LAYER, mask)]}
    if max(worst.values()) > TOLERANCE:
        return Verdict(
            True,
            f"the sliding-window layer attended to other tokens' K/V ({where}): worst |output - attention over its "
            f"own keys| extend {worst['extend']:.3g}, decode {worst['decode']:.3g} (the full layer agrees within "
            f"{full_worst:.1g})",
        )
    return Verdict(False, f"every output equals attention over the request's own keys ({where})")


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
