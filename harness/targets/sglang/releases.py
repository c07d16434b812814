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
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from harness.paths import REPO

ROOT = REPO / ".nox" / "sglang-releases"
# The import pins each release declares that are installed into its overlay; torch stays the base's CPU build (a
# constraint), the CUDA-only packages are never installed.
PINNED = ("xgrammar",)


@dataclass(frozen=True)
class Release:
    """An SGLang under test: a PyPI release (``0.5.20``) or a source tree (``/src/sglang/python``)."""

    spec: str

    @property
    def source(self) -> Path | None:
        return Path(self.spec) if os.sep in self.spec or self.spec.startswith(".") else None

    @property
    def label(self) -> str:
        return f"source:{self.source}" if self.source else self.spec

    @property
    def dirname(self) -> str:
        return (
            "source-" + re.sub(r"[^A-Za-z0-9.]+", "-", str(self.source.resolve())).strip("-")
            if self.source
            else self.spec
        )


def published(low: str, high: str, *, python: str = sys.executable) -> list[str]:
    """Every SGLang release on the package index from ``low`` to ``high``, inclusive, oldest first."""
    out = subprocess.run(
        [python, "-m", "pip", "index", "versions", "sglang"], capture_output=True, text=True, check=True
    ).stdout
    listed = re.search(r"Available versions: (.*)", out)
    if not listed:
        raise RuntimeError(f"pip index versions sglang printed no versions:\n{out}")
    versions = [Version(v) for v in listed.group(1).split(", ")]
    return [str(v) for v in sorted(v for v in versions if Version(low) <= v <= Version(high))]


def _site_packages(prefix: Path) -> Path:
    return Path(sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)}))


def _pip(python: Path, *args: str, log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ pip {' '.join(args)}\n")
        out.flush()
        result = subprocess.run(
            [str(python), "-m", "pip", "--disable-pip-version-check", *args], stdout=out, stderr=subprocess.STDOUT
        )
    if result.returncode:
        raise RuntimeError(f"pip {' '.join(args)} failed (exit {result.returncode}); its output: {log}")


def _declared_pins(site: Path) -> list[str]:
    """``name==version`` of each PINNED requirement the installed release declares (its dist-info METADATA)."""
    pins = []
    for meta in site.glob("sglang-*.dist-info/METADATA"):
        for line in meta.read_text().splitlines():
            found = re.match(r"Requires-Dist: (\w[\w-]*)\s*(==[^;\s]+)\s*$", line)
            if found and found.group(1).lower() in PINNED:
                pins.append(found.group(1) + found.group(2))
    return pins


def overlay(release: Release, *, root: Path = ROOT) -> Path:
    """The overlay venv's python for ``release`` over this interpreter's venv, created on first use, reused after."""
    import torch

    env = root / release.dirname
    python = env / "bin" / "python"
    site = _site_packages(env)
    base = f"{sysconfig.get_path('purelib')}\n"
    if (env / "ready").exists():
        (site / "base.pth").write_text(base)  # the overlay follows whichever base runs it
        return python
    env.mkdir(parents=True, exist_ok=True)
    log = env / "install.log"
    log.write_text("")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site.mkdir(parents=True, exist_ok=True)
    (site / "base.pth").write_text(base)
    constraints = env / "constraints.txt"
    constraints.write_text(f"torch=={torch.__version__.split('+')[0]}\n")
    if release.source:
        (site / "sglang-source.pth").write_text(f"{release.source.resolve()}\n")
    else:
        _pip(python, "install", "--no-deps", "--quiet", f"sglang=={release.spec}", log=log)
        pins = _declared_pins(site)
        if pins:
            _pip(python, "install", "--quiet", *pins, "-c", str(constraints), log=log)
    (env / "ready").write_text(json.dumps({"release": release.label}) + "\n")
    return python
