"""Import real SGLang on a CPU-only machine: version check, then the (tiny) import shims.

SGLANG_VERSION is the release the adapters were written against. Another version (or an editable
checkout, ``pip install -e <sglang>/python --no-deps``, which reports its own version) is refused
with a clear message unless ``SWA_HARNESS_SGLANG_ANY_VERSION=1`` says the user accepts that an
adapter may not match it.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from pathlib import Path
from types import ModuleType

from harness.env import SGLANG_ANY_VERSION_ENV as ANY_VERSION_ENV

SGLANG_VERSION = "0.5.23"
SHIMS = Path(__file__).resolve().parent / "import_shims"


class SGLangUnavailable(ImportError):
    """SGLang is not installed, or not the version the adapters were written for."""


def _install_shims() -> None:
    # A process spawned by SGLang's server inherits its parent's sys.path, shim included: without this,
    # ``import torchvision`` below would find the shim, and transformers would take it for the real one.
    sys.path[:] = [p for p in sys.path if p != str(SHIMS)]
    try:
        import torchvision  # noqa: F401 - a working torchvision needs no shim

        return
    except Exception:  # noqa: BLE001 - absent, or the CPU-incompatible wheel: fall back to the shim
        sys.modules.pop("torchvision", None)
    from transformers.utils import import_utils

    import_utils.is_torchvision_available()  # cached False now, before the shim becomes importable
    if str(SHIMS) not in sys.path:
        sys.path.append(str(SHIMS))


def _keep_shipped_config_names() -> None:
    """SGLang 0.5.11-0.5.16 register configs under names transformers 5.19 now ships (``qwen3_asr``), and
    ``AutoConfig.register`` refuses a shipped name: the registration keeps transformers' class instead. Only the
    model-config registry is touched, which no memory suite reads; a clash of any other kind still raises."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    register = AutoConfig.register
    if getattr(register, "swa_harness_shim", False):
        return

    def keep_shipped(model_type, config, exist_ok=False):
        if model_type in CONFIG_MAPPING._mapping and not exist_ok:
            return None
        return register(model_type, config, exist_ok=exist_ok)

    keep_shipped.swa_harness_shim = True
    AutoConfig.register = keep_shipped


def import_sglang(*, any_version: bool = False) -> ModuleType:
    """``sglang``, imported, after checking its version; ``SGLangUnavailable`` says what is wrong. ``any_version``: take
    whatever release is installed (the findings' reproducers run on every release to say where a bug was fixed)."""
    try:
        version = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        raise SGLangUnavailable(
            "the sglang target needs SGLang installed: `nox -s sglang` installs the pinned recipe "
            f"(sglang=={SGLANG_VERSION} --no-deps plus what its imports need)"
        ) from None
    if version != SGLANG_VERSION and not any_version and os.environ.get(ANY_VERSION_ENV) != "1":
        raise SGLangUnavailable(
            f"installed sglang is {version}; the adapters were written against {SGLANG_VERSION}. "
            f"Set {ANY_VERSION_ENV}=1 to run against it anyway (e.g. a local checkout of a branch)."
        )
    prepare_imports()
    import sglang

    return sglang


def prepare_imports() -> None:
    """The import shims alone, without importing SGLang: for a process that must set SGLang's environment before its
    first import (the findings' scripts that choose SGLang's CPU engine)."""
    _install_shims()
    _keep_shipped_config_names()
