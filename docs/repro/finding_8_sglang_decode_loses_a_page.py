"""SGLang: a paged decode that does not fit loses a page of the full pool (swa-harness docs/FINDINGS.md #8).

``SWATokenToKVPoolAllocator.alloc_decode`` asks the full allocator for the batch's new pages first and the SWA
allocator second, and returns ``None`` if either refused. When the SWA pool is the short one the full allocator has
already taken its page, and nothing gives it back: ``full_available_size()`` drops by a page per refused decode.
``alloc_extend`` checks ``new_pages_available`` for both pools before either allocator moves.

Scene (page size 4, full pool 64 slots, SWA pool 8 = two pages): two requests decode four tokens each, one token a
step (the SWA pool's two pages are now taken); the first request's fifth token opens a page. That decode must be
refused (``None``) and leave both pools as they were.

    python finding_8_sglang_decode_loses_a_page.py

Needs only SGLang (``pip install sglang``) and torch; runs on CPU, in about a second after the imports.
Exit status: 1 while the bug is there, 0 when it is fixed, 2 when the script could not set the scene up.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import traceback
from dataclasses import dataclass

EXIT_FIXED, EXIT_BUG, EXIT_SETUP = 0, 1, 2
PAGE, FULL_SLOTS, SWA_SLOTS = 4, 64, 8


class SetupProblem(Exception):
    """The scene could not be built on this install (no SGLang, an API this script does not know): no verdict."""


@dataclass(frozen=True)
class Verdict:
    bug_present: bool
    message: str


def _stub_torchvision() -> None:
    """SGLang's config modules import torchvision at module level, and never call it on the allocator's path. Where
    torchvision is absent or cannot load (a CPU-only torch), stand-ins with the names imported keep the import going;
    transformers is told first that torchvision is unavailable, so it never uses them."""
    import enum
    import importlib.machinery
    import types

    try:
        import torchvision  # noqa: F401

        return
    except Exception:  # noqa: BLE001 - absent, or a wheel that does not load beside this torch
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()  # cached False before the stand-ins exist

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


def _first(*candidates: tuple[str, str]) -> object:
    """The first ``module.attribute`` this SGLang has (the allocator moved modules in 0.5.13)."""
    for module, attribute in candidates:
        try:
            found = getattr(importlib.import_module(module), attribute, None)
        except ModuleNotFoundError:
            continue
        if found is not None:
            return found
    raise SetupProblem("this SGLang has none of " + ", ".join(f"{m}.{a}" for m, a in candidates))


def _build():
    import torch

    try:
        _stub_torchvision()
        from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
    except ImportError as error:
        raise SetupProblem(f"cannot import SGLang's SWA memory pool: {error}") from error
    allocator_class = _first(
        ("sglang.srt.mem_cache.allocator.swa", "SWATokenToKVPoolAllocator"),
        ("sglang.srt.mem_cache.swa_memory_pool", "SWATokenToKVPoolAllocator"),
    )
    extra = {}
    if "enable_kvcache_transpose" in inspect.signature(SWAKVPool.__init__).parameters:
        extra["enable_kvcache_transpose"] = False  # required up to 0.5.15
    pool = SWAKVPool(
        size=FULL_SLOTS,
        size_swa=SWA_SLOTS,
        page_size=PAGE,
        dtype=torch.float32,
        head_num=1,
        head_dim=4,
        swa_attention_layer_ids=[0],
        full_attention_layer_ids=[1],
        device="cpu",
        **extra,
    )
    return allocator_class(FULL_SLOTS, SWA_SLOTS, PAGE, torch.float32, "cpu", pool, need_sort=False)


def _decode(allocator, seq_len: int, last_loc: int):
    """One request's decode of the token that makes it ``seq_len`` long; ``last_loc`` is its previous token's slot."""
    import torch

    seq_lens = torch.tensor([seq_len], dtype=torch.int64)
    try:
        return allocator.alloc_decode(seq_lens, seq_lens.clone(), torch.tensor([last_loc], dtype=torch.int64))
    except RuntimeError as error:
        if "active drivers" in str(error):  # releases whose paged decode is a Triton kernel
            raise SetupProblem(f"this SGLang's paged alloc_decode launches a Triton kernel: CPU-unreachable ({error})")
        raise


def reproduce() -> Verdict:
    """Build the scene and say whether the refused decode took a page."""
    allocator = _build()
    last = {}
    for request in ("a", "b"):  # each request decodes four tokens: one page of each pool
        loc = -1
        for seq_len in range(1, PAGE + 1):
            out = _decode(allocator, seq_len, loc)
            if out is None:
                raise SetupProblem(f"request {request}'s token {seq_len} did not fit; the scene needs it to")
            loc = int(out[0])
        last[request] = loc
    before = (allocator.full_available_size(), allocator.swa_available_size())
    if before[1] != 0:
        raise SetupProblem(f"the SWA pool should be full now; available (full, SWA) {before}")
    out = _decode(allocator, PAGE + 1, last["a"])  # opens a page: the SWA pool has none
    after = (allocator.full_available_size(), allocator.swa_available_size())
    if out is not None:
        raise SetupProblem(f"a decode was served without an SWA page (slot {out.tolist()}); not this finding")
    if after != before:
        return Verdict(
            True,
            f"a refused decode took slots: available (full, SWA) {before} -> {after} "
            f"(the full pool lost {before[0] - after[0]} slots for good)",
        )
    return Verdict(False, f"the refused decode left both pools as they were: available (full, SWA) {after}")


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
    try:
        from importlib.metadata import version

        release = version("sglang")
    except Exception:  # noqa: BLE001 - a source tree without metadata
        release = "(unknown)"
    print(f"sglang {release}: {'BUG PRESENT' if verdict.bug_present else 'fixed'}: {verdict.message}")
    return EXIT_BUG if verdict.bug_present else EXIT_FIXED


if __name__ == "__main__":
    sys.exit(main())
