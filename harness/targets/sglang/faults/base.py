"""SGLang-side faults: real regressions (or their closest living relatives) injected into the
installed SGLang's own source, one module each under ``catalog/``.

A fault is a list of minimal source edits to SGLang functions, applied with SGLang's own
``debug_utils.source_patcher`` (rewrite the function's source, swap its ``__code__``) and undone on
exit. An edit whose text is no longer in the function fails loudly (``PatchApplicationError``), so
a fault never silently becomes a no-op when SGLang's code moves. ``SWA_HARNESS_SGLANG_FAULT=<id>``
switches one on for a whole process (the SGLang target applies it when it is built), with the
environment its mechanism needs (``SGLangFault.env``: an edit of the Python tree core sets
``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python``, which SGLang reads each time it builds a cache).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.env import SGLANG_FAULT_ENV as FAULT_ENV


@dataclass(frozen=True)
class SourceEdit:
    target: str  # dotted path of the SGLang function or method
    match: str  # exact source text (whitespace-normalised per line by the patcher)
    replacement: str


@dataclass(frozen=True)
class SGLangFault:
    id: str
    seed: str
    breaks: str
    user_sees: str
    invariant: str
    edits: tuple[SourceEdit, ...]
    structural_only: str = ""  # why no behavioural kill is expected (the real regression had no wrong output)
    env: tuple[tuple[str, str], ...] = ()  # SGLang settings the edited code runs under (e.g. the Python tree core)


def resolve(target: str):
    """The function object at a dotted path ``package.module.Class.method``."""
    parts = target.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise LookupError(f"cannot resolve {target}")


@contextlib.contextmanager
def inject(fault: SGLangFault) -> Iterator[SGLangFault]:
    """Apply every edit of ``fault`` to the installed SGLang, under its ``env``; restore both on exit."""
    saved = {name: os.environ.get(name) for name, _ in fault.env}
    states = apply(fault)
    os.environ.update(dict(fault.env))
    try:
        yield fault
    finally:
        for state in reversed(states):
            state.restore()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def apply(fault: SGLangFault) -> list:
    from sglang.srt.debug_utils.source_patcher.code_patcher import patch_function
    from sglang.srt.debug_utils.source_patcher.types import EditSpec

    by_target: dict[str, list[SourceEdit]] = {}
    for edit in fault.edits:
        by_target.setdefault(edit.target, []).append(edit)
    states = []
    try:
        for target, edits in by_target.items():
            fn = resolve(target)
            fn = getattr(fn, "__func__", fn)
            specs = [EditSpec(match=e.match, replacement=e.replacement) for e in edits]
            states.append(patch_function(target=fn, edits=specs))
    except Exception:
        for state in reversed(states):
            state.restore()
        raise
    return states


def write_into_tree(fault: SGLangFault, tree: Path) -> dict[Path, str]:
    """Write the fault's edits into the source files of a copy of the installed SGLang (``tree`` holds ``sglang/``):
    a checkout with the regression committed, as ``swa-harness check`` is meant to see one. The edits go through
    SGLang's own ``source_editor``, so a match that moved fails as it does in process. Returns each changed file's
    text before, to put back. A file is replaced, never written through: the tree may hard-link the installed one."""
    import sglang
    from sglang.srt.debug_utils.source_patcher.source_editor import apply_edits
    from sglang.srt.debug_utils.source_patcher.types import EditSpec

    installed = Path(sglang.__file__).resolve().parent.parent
    spans = []
    for target in dict.fromkeys(e.target for e in fault.edits):
        fn = resolve(target)
        fn = getattr(fn, "__func__", fn)
        lines, first = inspect.getsourcelines(fn)
        specs = [EditSpec(match=e.match, replacement=e.replacement) for e in fault.edits if e.target == target]
        spans.append((tree / Path(inspect.getsourcefile(fn)).resolve().relative_to(installed), first, lines, specs))
    originals: dict[Path, str] = {}
    for path, first, lines, specs in sorted(spans, key=lambda s: (str(s[0]), -s[1])):  # bottom-up: lines stay put
        text = path.read_text()
        originals.setdefault(path, text)
        current = text.splitlines(keepends=True)
        if current[first - 1 : first - 1 + len(lines)] != lines:
            raise ValueError(f"{path}: the tree differs from the installed SGLang at line {first}")
        edited = apply_edits(source="".join(lines), edits=specs)
        current[first - 1 : first - 1 + len(lines)] = [edited if edited.endswith("\n") else edited + "\n"]
        path.unlink()
        path.write_text("".join(current))
    return originals


def source_of(target: str) -> str:
    fn = resolve(target)
    return inspect.getsource(getattr(fn, "__func__", fn))


def apply_patch_file(path: str | os.PathLike) -> int:
    """Apply an ad-hoc source patch (SGLang's ``source_patcher`` YAML: targets, match, replacement/append) for good;
    how many functions it changed. A match that is not in the source raises: a patch never silently does nothing."""
    from sglang.srt.debug_utils.source_patcher.code_patcher import apply_patches_from_config

    return len(apply_patches_from_config(Path(path).read_text()))


def activate_from_env(environ: dict[str, str]) -> SGLangFault | None:
    fault_id = environ.get(FAULT_ENV, "").strip()
    if not fault_id:
        return None
    from harness.targets.sglang.faults.by_id import get_fault

    fault = get_fault(fault_id)
    apply(fault)
    os.environ.update(dict(fault.env))  # the process's own environment: SGLang reads it there, at each use
    return fault
