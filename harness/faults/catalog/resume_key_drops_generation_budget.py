"""swa-harness before issue 41: the resume cache's key held the client's batching but not the model's generation
budgets nor whether it is asked through chat, so a run with a longer budget resumed from a shorter one's answers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.faults.base import Fault, Patch
from harness.reuse import ResponseKey


def requests_of(
    batch_size: int, concurrency: int, chat: bool, max_gen_toks: Mapping[str, int]
) -> tuple[tuple[str, Any], ...]:
    """Twin of ``ResponseKey.requests_of``: batching only."""
    return (("batch_size", batch_size), ("concurrency", concurrency))


FAULT = Fault(
    id="resume-key-drops-generation-budget",
    seed="swa-harness 7d92a25 (harness/jobs/cache.py keyed batching, not max_gen_toks nor chat)",
    breaks="ResponseKey.requests_of keys prompts per request and concurrency only: a model's max_gen_toks per "
    "task and its chat endpoint are not in the key",
    user_sees="--resume after raising a model's generation budget (or switching it to chat) reuses answers cut at "
    "the old budget or asked through the other endpoint: accuracy that the new settings never produced",
    invariant="reuse: the resume key holds everything an answer depends on (harness/jobs/cache.py's table)",
    patches=(Patch(ResponseKey, "requests_of", staticmethod(requests_of)),),
)
