"""#25824: a change of the full -> SWA mapping forgets to invalidate the memo, one fault per mutation point.

The allocator's five mutations (alloc, free, free_swa, clear, set_full_to_swa_mapping) and the pool's
register_mapping all end in ``SWAKVPool.on_mapping_changed(<mutation>)``; each twin skips it for one
mutation only, as the real regression forgot it at one place.
"""

from __future__ import annotations

from harness.faults.base import Fault, Patch
from harness.mem.swa_kv_pool import SWAKVPool

_on_mapping_changed = SWAKVPool.on_mapping_changed


def _forgets(mutation: str):
    def twin(self: SWAKVPool, changed_by: str) -> None:
        if changed_by != mutation:
            _on_mapping_changed(self, changed_by)

    twin.__name__ = f"on_mapping_changed_except_{mutation}"
    twin.__doc__ = f"Twin of ``SWAKVPool.on_mapping_changed``: {mutation} leaves the memo as it was."
    return twin


def _fault(fault_id: str, mutation: str) -> Fault:
    return Fault(
        id=fault_id,
        seed="#25824",
        breaks=f"{mutation} changes the mapping without invalidating the translation memo",
        user_sees=f"after {mutation}, a translation returns SWA slots from before the mapping changed "
        "(slots freed, re-assigned or owned by other requests)",
        invariant="3: the SWA slot used for a token equals the current mapping of its full slot",
        patches=(Patch(SWAKVPool, "on_mapping_changed", _forgets(mutation)),),
    )


# The first keeps the catalog's original id (free_swa: the mutation the window slide runs every step).
FAULTS_BY_POINT = (
    _fault("no-invalidate-on-mutation", "free_swa"),
    _fault("no-invalidate-on-alloc", "alloc"),
    _fault("no-invalidate-on-free", "free"),
    _fault("no-invalidate-on-clear", "clear"),
    _fault("no-invalidate-on-set-mapping", "set_full_to_swa_mapping"),
    _fault("no-invalidate-on-register-mapping", "register_mapping"),
)
