"""swa-harness before issue 41: the history's series held the servers' settings but not the weights and tokenizer
they loaded, so a retrained checkpoint under the same name continued the old checkpoint's trend."""

from __future__ import annotations

from typing import Any

from harness.evals.history import HistoryEntry
from harness.faults.base import Fault, Patch

_CLEAN = HistoryEntry.__dict__["series_settings"]


def series_settings(self: HistoryEntry) -> dict[str, Any]:
    """Twin of ``HistoryEntry.series_settings``: no checkpoint, no data, no request settings."""
    return {"settings": _CLEAN(self)["settings"]}


FAULT = Fault(
    id="series-ignores-checkpoint",
    seed="swa-harness 7d92a25 (harness/evals/history.py: settings only)",
    breaks="HistoryEntry.series keys model, engine, fault, N and the served settings only: other weights, another "
    "tokenizer, changed task data or another request shape stay in the same series",
    user_sees="the report's trend puts runs of a retrained checkpoint (or an edited test set) after the old ones and "
    "calls the difference a verdict change, with a 'since when' that is not one",
    invariant="reuse: a trend compares like with like (harness/evals/history.py's series table)",
    patches=(Patch(HistoryEntry, "series_settings", series_settings),),
)
