"""Fault seams: the places in the clean code where a catalog fault swaps in its faulty twin.

A seam is a method marked with ``@seam("<fault id>", ...)`` or a class attribute declared with
``seam_value(Owner, "attr", "<fault id>", ...)``. The marker changes nothing at run time (the
decorator returns the function itself); it says, where the code is read, that a fault replaces this
and which one. ``harness.faults`` refuses a patch anywhere else, and ``tests/test_seams.py`` checks
that every seam is used by the faults it names and every twin still differs from the clean code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

SEAM_ATTR = "__seam_faults__"


class SeamError(LookupError):
    """A fault tried to patch something that is not a declared seam (or not one declared for it)."""


@dataclass(frozen=True)
class Seam:
    owner: type
    attr: str
    faults: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.owner.__module__}.{self.owner.__qualname__}.{self.attr}"


_VALUE_SEAMS: dict[tuple[type, str], tuple[str, ...]] = {}


def seam(*fault_ids: str) -> Callable[[F], F]:
    """Mark a method as the seam of these faults; the method itself is returned unchanged."""
    if not fault_ids:
        raise ValueError("a seam names at least one fault")

    def mark(fn: F) -> F:
        setattr(fn, SEAM_ATTR, fault_ids)
        return fn

    return mark


def seam_value(owner: type, attr: str, *fault_ids: str) -> None:
    """Declare a class attribute (a table, a policy) as the seam of these faults."""
    if attr not in owner.__dict__:
        raise SeamError(f"{owner.__qualname__} has no attribute {attr!r} of its own to declare as a seam")
    if not fault_ids:
        raise ValueError("a seam names at least one fault")
    _VALUE_SEAMS[owner, attr] = fault_ids


def lookup(owner: type, attr: str) -> Seam:
    """The seam at ``owner.attr``; ``SeamError`` when nothing there is marked as one."""
    value = owner.__dict__.get(attr)
    faults = getattr(value, SEAM_ATTR, None) or _VALUE_SEAMS.get((owner, attr))
    if not faults:
        raise SeamError(f"{owner.__qualname__}.{attr} is not a declared seam (mark it with @seam or seam_value)")
    return Seam(owner, attr, tuple(faults))


def declared_seams(classes: list[type]) -> list[Seam]:
    """Every seam declared on these classes, methods and values alike."""
    found = []
    for cls in classes:
        for attr, value in cls.__dict__.items():
            if getattr(value, SEAM_ATTR, None) or (cls, attr) in _VALUE_SEAMS:
                found.append(lookup(cls, attr))
    return found
