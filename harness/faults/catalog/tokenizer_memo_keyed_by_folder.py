"""swa-harness before issue 41: the report's tokenizer memo was keyed by the checkpoint folder alone."""

from __future__ import annotations

from harness.faults.base import Fault, Patch
from harness.reuse import TokenizerMemo


def key(path: str) -> tuple[str, str | None]:
    """Twin of ``TokenizerMemo.key``: the folder only."""
    return path, None


FAULT = Fault(
    id="tokenizer-memo-keyed-by-folder",
    seed="swa-harness 7d92a25 (harness/jobs/runner.py's _TOKENIZERS, keyed by path)",
    breaks="TokenizerMemo.key is the folder: a checkpoint whose tokenizer.json is replaced in place keeps being "
    "split with the tokenizer loaded first",
    user_sees="a report rendered in the same process after the checkpoint changed shows each flip's first "
    "differing token at the wrong place, in the old tokenizer's pieces",
    invariant="reuse: a memo's key holds what its value depends on",
    patches=(Patch(TokenizerMemo, "key", staticmethod(key)),),
)
