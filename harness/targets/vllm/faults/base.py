"""vLLM-side faults: real regressions from vLLM's sliding-window, hybrid KV-cache manager, block-table and padding
history, injected into the installed vLLM's own source, one module each under ``catalog/``.

A fault is a list of minimal source edits to vLLM functions (``SourceEdit``, the SGLang faults' record). vLLM has no
source patcher of its own, so this module is one: take the function's source, find the edit's match in it (each line
compared with its surrounding whitespace stripped; it must occur exactly once), put the replacement there at the
matched block's indentation, compile the edited function in its module's globals and swap the function's
``__code__``; restore it on exit. A match that is gone or ambiguous raises ``SourcePatchError``: when vLLM's code
moves, a fault fails loudly instead of silently becoming a no-op. ``SWA_HARNESS_VLLM_FAULT=<id>`` switches one on for
a whole process (``suites/vllm/conftest.py`` applies it when the suites are collected).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import os
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import CodeType, FunctionType

from harness.env import VLLM_FAULT_ENV as FAULT_ENV
from harness.targets.sglang.faults.base import SourceEdit  # a plain record: its module imports no SGLang

__all__ = ["FAULT_ENV", "SourceEdit", "SourcePatchError", "VLLMFault", "activate_from_env", "apply", "inject"]


class SourcePatchError(LookupError):
    """An edit cannot be applied as written: its match is not in the function, is there twice, or the edited
    function no longer fits the original's closure."""


@dataclass(frozen=True)
class VLLMFault:
    id: str
    seed: str  # the vLLM PR (or issue) the regression comes from
    breaks: str  # what goes wrong, in vLLM's terms
    user_sees: str  # what a serving user would notice
    invariant: str  # the invariant of suites/vllm it violates
    edits: tuple[SourceEdit, ...]
    structural_only: str = ""  # why no behavioural kill is expected (the real regression had no wrong output)
    env: tuple[tuple[str, str], ...] = ()  # vLLM settings the edited code runs under


def resolve(target: str) -> FunctionType:
    """The plain function behind a dotted ``package.module[.Class].function``: a classmethod's or staticmethod's
    function, a decorated function's innermost one (``__wrapped__``)."""
    parts = target.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        for i, attr in enumerate(parts[split:], split):
            owner, obj = obj, getattr(obj, attr, None)
            if obj is None:
                raise SourcePatchError(f"{target}: {'.'.join(parts[:i])} has no attribute {attr!r}")
            if isinstance(owner, type):  # look through classmethod/staticmethod to the function they hold
                raw = inspect.getattr_static(owner, attr)
                obj = raw.__func__ if isinstance(raw, (classmethod, staticmethod)) else obj
        fn = inspect.unwrap(getattr(obj, "__func__", obj))
        if not isinstance(fn, FunctionType):
            raise SourcePatchError(f"{target} is a {type(fn).__name__}, not a Python function")
        return fn
    raise SourcePatchError(f"cannot import any module of {target}")


def source_of(target: str) -> str:
    return inspect.getsource(resolve(target))


def _norm(lines: list[str]) -> list[str]:
    return [line.strip() for line in lines]


def edit_source(target: str, source: str, edit: SourceEdit) -> str:
    """``source`` with ``edit.match`` (whole lines, each compared stripped) replaced by ``edit.replacement``, whose
    lines keep their indentation relative to each other and take the matched block's."""
    lines = source.splitlines()
    match = _norm(edit.match.strip("\n").splitlines())
    if not match or not any(match):
        raise SourcePatchError(f"{target}: an edit with an empty match")
    stripped = _norm(lines)
    found = [i for i in range(len(lines) - len(match) + 1) if stripped[i : i + len(match)] == match]
    if len(found) != 1:
        lines_at = [i + 1 for i in found]  # counted from the def line, 1
        where = "is not in" if not found else f"occurs {len(found)} times (lines {lines_at} from the def) in"
        raise SourcePatchError(f"{target}: the match {edit.match!r} {where} the installed source")
    start = found[0]
    indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
    body = textwrap.dedent(edit.replacement.strip("\n")).splitlines()
    replaced = [indent + line if line.strip() else "" for line in body]
    return "\n".join(lines[:start] + replaced + lines[start + len(match) :]) + "\n"


def _compile_function(fn: FunctionType, edited: str, first_line: int) -> CodeType:
    """Compile the edited source of ``fn`` (its ``def`` and body, at their indentation in the installed file, so
    multi-line strings stay as they are) into a code object that can replace ``fn.__code__``. A method is defined
    inside a class of its owner's name (private names mangle the same, ``super()`` finds ``__class__``), and a
    closure inside an outer function that binds the names it closes over, so the new code takes the same cells."""
    indent = len(edited) - len(edited.lstrip())
    owner = fn.__qualname__.split(".")[-2] if "." in fn.__qualname__ else None
    owner = None if owner == "<locals>" else owner
    freevars = [name for name in fn.__code__.co_freevars if name != "__class__"]
    if "__class__" in fn.__code__.co_freevars and owner is None:
        raise SourcePatchError(f"{fn.__qualname__}: uses super() but is not defined in a class")
    if owner is None and not freevars:
        wrapper = ["if True:"] if indent else []  # a nested function that closes over nothing: any enclosing block
        result = None
    elif indent >= 2:  # the outer function's body at column 1, the installed def deeper
        wrapper = ["def __swa_harness_outer__():"] + [f" {name} = None" for name in freevars]
        wrapper += [f" class {owner}:" if owner else " if True:"]  # a block of its own for the installed def
        result = f" return {owner}.__dict__[{fn.__name__!r}]" if owner else f" return {fn.__name__}"
    else:
        raise SourcePatchError(f"{fn.__qualname__}: its def is indented {indent} columns; a wrapper needs 2")
    source = "\n".join(wrapper + edited.rstrip("\n").splitlines() + ([result] if result else [])) + "\n"
    tree = ast.parse(source)
    ast.increment_lineno(tree, first_line - len(wrapper) - 1)  # tracebacks point at the installed file's lines
    namespace: dict[str, object] = {}
    exec(compile(tree, fn.__code__.co_filename, "exec"), fn.__globals__, namespace)
    new = namespace["__swa_harness_outer__"]() if result else namespace[fn.__name__]  # type: ignore[operator]
    code = new.__code__  # type: ignore[attr-defined]
    if code.co_freevars != fn.__code__.co_freevars:
        raise SourcePatchError(
            f"{fn.__qualname__}: the edited function closes over {code.co_freevars}, the installed one over "
            f"{fn.__code__.co_freevars}; an edit may not change what a closure captures"
        )
    # Its own name, not the wrapper's: tracebacks and the kill matrix's call trace (harness/faults/impact.py) see it.
    return code.replace(co_qualname=fn.__code__.co_qualname)


def patched_code(target: str, edits: list[SourceEdit]) -> tuple[FunctionType, CodeType]:
    """The function at ``target`` and the code object its edited source compiles to (nothing swapped yet)."""
    fn = resolve(target)
    lines, first = inspect.getsourcelines(fn)
    # Parsed as it is (a dedent would break multi-line strings), inside a block when the def is indented.
    indented = lines[0][:1].isspace()
    tree = ast.parse(("if True:\n" if indented else "") + "".join(lines))
    node = tree.body[0].body[0] if indented else tree.body[0]  # type: ignore[attr-defined]
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        raise SourcePatchError(f"{target}: the source found is not a function definition")
    def_line = node.lineno - 1 - indented  # below the decorators
    body = "".join(lines[def_line:])
    for edit in edits:
        body = edit_source(target, body, edit)
    return fn, _compile_function(fn, body, first + def_line)


@dataclass(frozen=True)
class CodeSwap:
    """One function whose ``__code__`` a fault replaced, and the code to put back."""

    fn: FunctionType
    clean: CodeType

    def restore(self) -> None:
        self.fn.__code__ = self.clean


def apply(fault: VLLMFault) -> list[CodeSwap]:
    """Swap in the edited code of every function ``fault`` edits; all or nothing (every edit is compiled before any
    function changes). Returns what ``restore`` undoes."""
    by_target: dict[str, list[SourceEdit]] = {}
    for edit in fault.edits:
        by_target.setdefault(edit.target, []).append(edit)
    compiled = [patched_code(target, edits) for target, edits in by_target.items()]
    swaps = []
    for fn, code in compiled:
        swaps.append(CodeSwap(fn, fn.__code__))
        fn.__code__ = code
    return swaps


@contextlib.contextmanager
def inject(fault: VLLMFault) -> Iterator[VLLMFault]:
    """Apply every edit of ``fault`` to the installed vLLM, under its ``env``; restore both on exit."""
    saved = {name: os.environ.get(name) for name, _ in fault.env}
    swaps = apply(fault)
    os.environ.update(dict(fault.env))
    try:
        yield fault
    finally:
        for swap in reversed(swaps):
            swap.restore()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def activate_from_env(environ: Mapping[str, str]) -> VLLMFault | None:
    """Apply the fault named by ``SWA_HARNESS_VLLM_FAULT`` for the rest of the process (None when unset)."""
    fault_id = environ.get(FAULT_ENV, "").strip()
    if not fault_id:
        return None
    from harness.targets.vllm.faults.by_id import get_fault

    fault = get_fault(fault_id)
    apply(fault)
    os.environ.update(dict(fault.env))
    return fault
