"""One environment per SGLang release, each a thin overlay over one shared base venv.

A full SGLang-on-CPU venv is 2.7 GB (torch, transformers, the harness): the sixteen releases from 0.5.11 to 0.5.23
would need 43 GB. Their overlays take 3.5 GB together (measured; 160-290 MB each). Each release's overlay is instead
a venv of its own (``python -m venv --without-pip``) whose ``base.pth`` puts the base venv's site-packages *after*
its own: what the overlay installs shadows the base, the rest is shared.
An overlay holds the release's wheel (``--no-deps``, 170 MB unpacked) and the grammar backend its metadata pins
(xgrammar: 0.5.16 imports it at module level, 0.5.20 inside ``SWAKVPool.set_kv_buffer``); pip sees the base's torch
and never replaces it. transformers stays the base's (5.19): each release's own pin (5.6-5.12) makes SGLang's
``register_image_processor`` demand torchvision, which has no wheel that loads beside the CPU torch; with 5.19 the
one clash, a config name transformers now ships, is met by an import shim (``imports.py``).

Overlays live in ``.nox/sglang-releases/<release>`` and are reused: a ``ready`` file marks a finished install.
``SWA_HARNESS_SGLANG=<checkout>/python`` names a source tree instead; its overlay holds a ``.pth`` to that folder.
The overlay mechanics are shared with vLLM's matrix: ``harness/targets/releases.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.paths import REPO
from harness.targets import releases as shared
from harness.targets.releases import Release

ROOT = REPO / ".nox" / "sglang-releases"
# The import pins each release declares that are installed into its overlay; torch stays the base's CPU build (a
# constraint), the CUDA-only packages are never installed.
PINNED_REQUIREMENTS = ("xgrammar",)  # pinned as the release's wheel pins them (Package.pinned)
PACKAGE = shared.Package("sglang", root=ROOT, pinned=PINNED_REQUIREMENTS)

__all__ = ["PACKAGE", "PINNED_REQUIREMENTS", "ROOT", "Release", "overlay", "published"]


def published(low: str, high: str, *, python: str = sys.executable) -> list[str]:
    """Every SGLang release on the package index from ``low`` to ``high``, inclusive, oldest first."""
    return shared.published(PACKAGE.distribution, low, high, python=python)


def overlay(release: Release, *, root: Path = ROOT) -> Path:
    """The overlay venv's python for ``release`` over this interpreter's venv, created on first use, reused after."""
    return shared.overlay(release, PACKAGE, root=root)
