"""Shards: one long matrix (kill, mutation, release) split over several machines, each cell on exactly one of them.

A cell goes to a shard by a stable hash of its id (sha256, never Python's ``hash``, which is salted per process), so
shard K of N holds the same cells on every machine and every run, whatever order the cells were listed in; the
shards' reports merge back into the report one machine writes. ``--shard K/N`` counts from 1.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Shard:
    index: int  # 1..count
    count: int

    def __post_init__(self) -> None:
        if not 1 <= self.index <= self.count:
            raise ValueError(f"shard {self.index}/{self.count}: K must lie in 1..N")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``K/N`` as a user types it; a clear error naming the flag otherwise."""
        k, sep, n = text.partition("/")
        if not sep or not k.strip().isdigit() or not n.strip().isdigit():
            raise ValueError(f"--shard {text!r}: expected K/N, e.g. 2/4")
        return cls(int(k), int(n))

    def holds(self, cell_id: str) -> bool:
        digest = hashlib.sha256(cell_id.encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index - 1

    def select(self, cell_ids: Iterable[str]) -> list[str]:
        return [c for c in cell_ids if self.holds(c)]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


WHOLE = Shard(1, 1)
