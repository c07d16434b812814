"""Errors raised by the memory pools.

Every error names the offending argument and the contract it broke, so a failing suite points at the
call site instead of a downstream index error. All derive from ``PoolError`` (a ``ValueError``).
"""

from __future__ import annotations


class PoolError(ValueError):
    """Base class for misuse of a pool or allocator."""


class IndexContractError(PoolError):
    """An index tensor has the wrong dtype, device or rank, or holds out-of-range slot ids."""


class DoubleFreeError(PoolError):
    """A slot (or page) was given back while already free."""


class PaddingSlotError(PoolError):
    """Slot 0 (the padding sentinel) was passed where only live slots are allowed."""


class AlignmentError(PoolError):
    """A paged allocator was asked for a size, or given slots, that do not cover whole pages."""
