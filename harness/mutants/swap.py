"""A mutant put into a module that is already imported: the one function it changes gets the mutated code.

Why: a mutant's run forked from a warm fork server (``harness/faults/forkserver.py``) starts with the engine imported,
so the import of mutated text (``activate.MutantFinder``) comes too late there. Where every change a mutant makes
lies inside one function's body, swapping that function's ``__code__`` in the child is the mutant as a fresh process
would import it: every reference to the function (``from x import f`` elsewhere, bound methods, registries) holds
the same function object, so each sees the new code. Anything else stays a fresh process:

* a change outside every function body (module level, a class body, a default value, a decorator's argument):
  that code ran at import, before any swap could;
* a function the warm server itself called while it imported and collected (``ForkServer.called``): what it
  built then (a table, a module-level object) was built by the installed code;
* a function whose object cannot be found by its qualified name, or whose closure would change.

The test of "inside one function" is on compiled code, not text: both texts are compiled and their code trees
walked side by side; every code object whose own parts differ must lie in the same outermost function.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from types import CodeType, FunctionType, ModuleType
from typing import Any

CO_OPTIMIZED = inspect.CO_OPTIMIZED  # set for functions, lambdas and comprehensions; not for modules or class bodies


class SwapError(RuntimeError):
    """The mutant cannot be swapped into the imported module: the message says why (run it in a fresh process)."""


def _is_function(code: CodeType) -> bool:
    return bool(code.co_flags & CO_OPTIMIZED)


def _const_key(value: Any) -> Any:
    """A constant as the compiler's result distinguishes it (``0`` is not ``0.0`` nor ``False``); nested code aside."""
    if isinstance(value, CodeType):
        return ("<code>",)
    if isinstance(value, (tuple, frozenset)):
        items = [_const_key(v) for v in value]
        return (type(value).__name__, tuple(sorted(items, key=repr) if isinstance(value, frozenset) else items))
    return (type(value).__name__, repr(value))


def _own(code: CodeType) -> tuple[Any, ...]:
    """What a code object holds itself, its nested code objects left out (they are compared one by one)."""
    return (
        code.co_code,
        code.co_names,
        code.co_varnames,
        code.co_freevars,
        code.co_cellvars,
        code.co_flags,
        code.co_argcount,
        code.co_posonlyargcount,
        code.co_kwonlyargcount,
        code.co_firstlineno,
        tuple(code.co_lines()),  # lines, not columns: a changed line's length moves the columns of the def around it
        code.co_exceptiontable,
        code.co_qualname,
        tuple(_const_key(c) for c in code.co_consts),
    )


def _nested(code: CodeType) -> list[CodeType]:
    return [c for c in code.co_consts if isinstance(c, CodeType)]


def _owners(a: CodeType, b: CodeType, owner: str | None) -> Iterator[str | None]:
    """The outermost function (its qualname; None outside every function) of each place the two trees differ."""
    if owner is None and _is_function(a):
        owner = a.co_qualname
    inner_a, inner_b = _nested(a), _nested(b)
    if _own(a) != _own(b) or len(inner_a) != len(inner_b):
        yield owner
        if len(inner_a) != len(inner_b):
            return
    for x, y in zip(inner_a, inner_b):
        yield from _owners(x, y, owner)


def changed_function(original: str, mutated: str, filename: str) -> str | None:
    """The qualified name of the one outermost function whose body holds every difference the mutant makes in the
    compiled module, or None where a difference lies outside every function body, the two compile the same, or the
    mutant does not compile."""
    try:
        owners = set(_owners(compile(original, filename, "exec"), compile(mutated, filename, "exec"), None))
    except (SyntaxError, ValueError):  # a mutant that does not compile (``*,`` made ``+,``): the import says so
        return None
    if len(owners) != 1:
        return None
    (owner,) = owners
    return owner if owner is not None and "<locals>" not in owner else None


def _find_code(code: CodeType, qualname: str) -> CodeType:
    found = [c for c in _walk(code) if c.co_qualname == qualname and _is_function(c)]
    if len(found) != 1:
        raise SwapError(f"{len(found)} code objects named {qualname} in the mutated module")
    return found[0]


def _walk(code: CodeType) -> Iterator[CodeType]:
    yield code
    for inner in _nested(code):
        yield from _walk(inner)


def _unwrapped(value: Any) -> Iterator[Any]:
    """``value`` and what it wraps: a staticmethod's or classmethod's function, a property's accessors, a
    ``functools.wraps`` wrapper's ``__wrapped__``."""
    seen: set[int] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        if v is None or id(v) in seen:
            continue
        seen.add(id(v))
        yield v
        if isinstance(v, (staticmethod, classmethod)):
            todo.append(v.__func__)
        elif isinstance(v, property):
            todo += [v.fget, v.fset, v.fdel]
        elif isinstance(v, functools.partialmethod):
            todo.append(v.func)
        todo.append(getattr(v, "__wrapped__", None))


def _held(module: ModuleType, qualname: str) -> Any:
    """What the module (through its classes) holds under that qualified name: the function or its wrapper."""
    *path, name = qualname.split(".")
    owner: Any = module
    for part in path:
        owner = vars(owner).get(part) if hasattr(owner, "__dict__") else None
        if owner is None:
            raise SwapError(f"{module.__name__}.{qualname}: no {part!r} on the way")
    return vars(owner).get(name)


def function_named(module: ModuleType, qualname: str, filename: str) -> FunctionType:
    """The module's function object with that qualified name and source file, through classes and wrappers."""
    matches = [
        f
        for f in _unwrapped(_held(module, qualname))
        if isinstance(f, FunctionType) and f.__code__.co_qualname == qualname and f.__code__.co_filename == filename
    ]
    if len(matches) != 1:
        raise SwapError(f"{module.__name__}.{qualname}: {len(matches)} functions of that name from {filename}")
    return matches[0]


def swap_in(module: ModuleType, mutated: str, qualname: str) -> FunctionType:
    """Give the imported module's function ``qualname`` its code from the mutated text (the caller checked, with
    ``changed_function``, that nothing else differs); the function whose code changed. Caches of a wrapper
    (``functools.lru_cache``) are cleared: they hold answers of the installed code."""
    filename = module.__file__ or ""
    fn = function_named(module, qualname, filename)
    new = _find_code(compile(mutated, filename, "exec"), qualname)
    if new.co_freevars != fn.__code__.co_freevars:
        raise SwapError(f"{qualname}: the mutant changes what the closure captures ({new.co_freevars})")
    for wrapper in _unwrapped(_held(module, qualname)):
        if callable(clear := getattr(wrapper, "cache_clear", None)):
            clear()
    fn.__code__ = new
    return fn


def functions_of(module: ModuleType) -> list[FunctionType]:
    """The functions defined in the module's own file, at its top level and in its classes (through wrappers):
    what a swap can change, so what a fork server checks it still holds as installed."""
    filename = module.__file__ or ""
    found: dict[int, FunctionType] = {}
    seen: set[int] = set()
    todo: list[Any] = [module]
    while todo:
        holder = todo.pop()
        if id(holder) in seen:
            continue
        seen.add(id(holder))
        for value in list(vars(holder).values()):
            if isinstance(value, type) and value.__module__ == module.__name__:
                todo.append(value)
                continue
            for f in _unwrapped(value):
                if isinstance(f, FunctionType) and f.__code__.co_filename == filename:
                    found[id(f)] = f
    return list(found.values())
