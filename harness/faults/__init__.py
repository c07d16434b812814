"""The fault catalog: every row of docs/FAULTS.md as a named, injectable regression.

with inject("pad-swa-loc-not-zeroed"): ...        # one block
SWA_HARNESS_FAULT=pad-swa-loc-not-zeroed nox -s tests   # one process
"""

from __future__ import annotations

from harness.faults.base import FAULT_ENV, Fault, Patch, activate_from_env, inject


def __getattr__(name: str) -> object:
    """``FAULTS`` and ``get_fault`` load the catalog (and so torch) on first use, not on ``import harness.faults``."""
    if name in ("FAULTS", "get_fault"):
        from harness.faults import by_id

        return getattr(by_id, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FAULTS", "FAULT_ENV", "Fault", "Patch", "activate_from_env", "get_fault", "inject"]
