"""A fault is a named regression from FAULTS.md, injected by swapping one method (or one policy
entry) of the implementation under test for its faulty twin, for one run.

The clean code carries no fault flags: injection patches attributes from outside, restores them
on exit, and can be switched on for a whole process through ``SWA_HARNESS_FAULT=<id>`` (used to
run the suites, the server and the accuracy runs with one fault on).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

FAULT_ENV = "SWA_HARNESS_FAULT"


@dataclass(frozen=True)
class Patch:
    owner: Any  # a class or module
    attr: str
    replacement: Any


@dataclass(frozen=True)
class Fault:
    id: str
    seed: str  # the SGLang PR the regression comes from
    breaks: str  # what goes wrong, in the implementation's terms
    user_sees: str  # what a serving user would notice
    invariant: str  # the FAULTS.md invariant (or design property) it violates
    patches: tuple[Patch, ...]

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "seed": self.seed, "breaks": self.breaks, "user_sees": self.user_sees,
                "invariant": self.invariant}


_active: list[tuple[Patch, Any]] = []


def _apply(fault: Fault) -> list[tuple[Patch, Any]]:
    applied = []
    for patch in fault.patches:
        applied.append((patch, patch.owner.__dict__[patch.attr] if isinstance(patch.owner, type) else getattr(patch.owner, patch.attr)))
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
