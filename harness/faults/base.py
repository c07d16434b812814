"""A fault is a named regression (docs/FAULTS.md), injected by swapping the clean code at one or
more declared seams (``harness.seams``) for its faulty twin, for one run.

The clean code carries no fault flags: injection patches seams from outside, restores them on
exit, and can be switched on for a whole process through ``SWA_HARNESS_FAULT=<id>`` (used to run
the suites, the server and the accuracy runs with one fault on). A patch anywhere but at a seam
declared for that fault is refused when the catalog is built.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from dataclasses import dataclass
from typing import Any

from harness.seams import SeamError, lookup

from harness.env import FAULT_ENV


@dataclass(frozen=True)
class Patch:
    """Replace the seam ``owner.attr`` with ``replacement`` (the twin) while the fault is on."""

    owner: type
    attr: str
    replacement: Any

    def original(self) -> Any:
        return self.owner.__dict__[self.attr]


@dataclass(frozen=True)
class Fault:
    id: str
    seed: str  # the SGLang PR the regression comes from
    breaks: str  # what goes wrong, in the implementation's terms
    user_sees: str  # what a serving user would notice
    invariant: str  # the docs/FAULTS.md invariant (or design property) it violates
    patches: tuple[Patch, ...]
    structural_only: str = ""  # why no behavioural kill is expected (the real regression had no wrong output)

    def __post_init__(self) -> None:
        for patch in self.patches:
            if self.id not in lookup(patch.owner, patch.attr).faults:
                raise SeamError(
                    f"fault {self.id}: {patch.owner.__qualname__}.{patch.attr} is a seam, but not one "
                    f"declared for this fault (add its id to the marker)"
                )


def with_entry(table: Mapping[str, Any], name: str, **changes: Any) -> Mapping[str, Any]:
    """A copy of a field table (e.g. ``DECODE_FIELDS``) whose entry ``name`` has ``changes``: a table twin."""
    return MappingProxyType({**table, name: dataclasses.replace(table[name], **changes)})


_active: list[tuple[Patch, Any]] = []


def _apply(fault: Fault) -> list[tuple[Patch, Any]]:
    applied = []
    for patch in fault.patches:
        applied.append((patch, patch.original()))
        setattr(patch.owner, patch.attr, patch.replacement)
    return applied


def _restore(applied: list[tuple[Patch, Any]]) -> None:
    for patch, original in reversed(applied):
        setattr(patch.owner, patch.attr, original)


@contextlib.contextmanager
def inject(fault: Fault | str) -> Iterator[Fault]:
    """Switch one fault on for the duration of the block."""
    from harness.faults import get_fault

    fault = get_fault(fault) if isinstance(fault, str) else fault
    applied = _apply(fault)
    try:
        yield fault
    finally:
        _restore(applied)


def activate_from_env() -> Fault | None:
    """Apply the fault named by ``SWA_HARNESS_FAULT`` for the rest of this process (no-op when unset)."""
    from harness.faults import get_fault

    fault_id = os.environ.get(FAULT_ENV, "").strip()
    if not fault_id or _active:
        return None
    fault = get_fault(fault_id)
    _active.extend(_apply(fault))
    return fault
