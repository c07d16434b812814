"""An import-only stand-in for ``sgl_kernel`` (SGLang's CUDA kernel package) for SGLang's CPU server.

SGLang imports ``sgl_kernel`` and its submodules at module level, whatever the device; PyPI has no CPU
build of it. On a CPU without AMX, SGLang's CPU layers take their plain-PyTorch paths, so no function of
it should ever be called. Every name this module (or a submodule) hands out is a function that raises
:class:`SglKernelCalled` naming itself: a call is a finding (SGLang took a kernel path on CPU), never a
silent wrong result.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

__version__ = "0.0.0+harness-stand-in"
# Submodules left absent: SGLang imports them inside ``try/except ImportError`` and has its own CPU fallback.
ABSENT = frozenset({"sgl_kernel.scalar_type"})


class SglKernelCalled(RuntimeError):
    """SGLang called a function of the stand-in: a CUDA kernel path ran on CPU."""


def _stub(qualname: str) -> Any:
    def called(*args: Any, **kwargs: Any) -> Any:
        raise SglKernelCalled(
            f"{qualname} was called: SGLang took an sgl_kernel path on CPU (the harness's "
            "import-only stand-in has no kernels)"
        )

    called.__name__ = called.__qualname__ = qualname.rsplit(".", 1)[-1]
    called.__module__ = qualname.rsplit(".", 1)[0]
    return called


class _StandInModule(types.ModuleType):
    """A module whose every missing attribute is a raising stub (``from sgl_kernel.x import f`` works)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        stub = _stub(f"{self.__name__}.{name}")
        setattr(self, name, stub)
        return stub


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes every ``sgl_kernel.<sub>`` importable as another stand-in module (a package, so it nests)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith(__name__ + ".") and fullname not in ABSENT:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []  # a package: its submodules come from this finder too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


sys.meta_path.insert(0, _Finder())
sys.modules[__name__].__class__ = _StandInModule
