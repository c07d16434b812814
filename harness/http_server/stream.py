"""``stream: true``: the answer as OpenAI's Server-Sent Events, a chunk per step of each choice's new text.

Each event is ``data: {json}\\n\\n``; the stream ends with ``data: [DONE]\\n\\n``. A completions chunk carries
``choices: [{index, text, logprobs: null, finish_reason}]``, a chat chunk (``chat.completion.chunk``)
``choices: [{index, delta, logprobs: null, finish_reason}]``, whose first delta is the role. Each choice's last
chunk has its ``finish_reason``; with ``stream_options.include_usage`` every chunk has ``usage: null`` and one more
chunk with ``choices: []`` and the usage comes before ``[DONE]``. An error after the response started (the engine
failed, the server is stopping) is one ``data: {"error": {...}}`` event, with no ``[DONE]`` after it: a stream
without ``[DONE]`` is incomplete.

Per step, not per request: the worker already knows after every engine step which requests gained tokens
(worker.NewTokens), so text goes out as it is made, at the cost of a decode per step for each streamed choice
(the whole output so far: O(n^2) in the output's length, as the engine's stop-string check already is).

The joined text is exactly what a non-streamed request returns, because nothing sent is ever taken back
(``TextStream``): a chunk holds only text that the next token can no longer change, so a character is sent
one token late (the tokenizer's decoder may rewrite the end of the text when a token follows, e.g. an
incomplete UTF-8 sequence, U+FFFD, or spaces around punctuation), and no suffix that could begin a stop
string (the engine cuts the text before a stop string it finds, perhaps tokens later). The last chunk of a
choice is the rest of the engine's final text, the one a non-streamed request returns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from harness.model import Tokenizer

DONE = b"data: [DONE]\n\n"


class StreamDiverged(RuntimeError):
    """The final text does not begin with the text already sent (a decoder this module's rule does not cover)."""


class TextStream:
    """One choice's text as its tokens arrive: ``advance`` gives what can be sent now, ``finish`` the rest."""

    def __init__(self, tokenizer: Tokenizer, stop: Sequence[str]) -> None:
        self._tokenizer = tokenizer
        self._stop = tuple(stop)
        self._ids: list[int] = []
        self._last = ""  # the decoded text after the previous token
        self.sent = ""

    def advance(self, new_ids: Sequence[int]) -> str:
        """The text that ``new_ids`` settle: it can be sent and will begin the final text. Decoded as the
        engine decodes its outputs (``Tokenizer.decode``'s defaults), so that both texts agree."""
        self._ids += new_ids
        text = self._tokenizer.decode(self._ids)
        settled = _common_prefix(self._last, text)  # what the latest tokens left unchanged
        self._last = text
        end = min(settled, _stop_free(text, self._stop))
        while end > 0 and text[end - 1] == "\ufffd":  # an incomplete character may still be completed
            end -= 1
        if end <= len(self.sent) or not text.startswith(self.sent):
            return ""  # nothing new settled (or the decoder rewrote sent text: finish() will say so)
        delta = text[len(self.sent) : end]
        self.sent += delta
        return delta

    def finish(self, final_text: str) -> str:
        """The rest of the engine's final text; raises StreamDiverged if what was sent is not its beginning."""
        if not final_text.startswith(self.sent):
            raise StreamDiverged(
                f"the streamed text ({len(self.sent)} characters) is not the beginning of the final text "
                f"({len(final_text)} characters)"
            )
        rest = final_text[len(self.sent) :]
        self.sent = final_text
        return rest


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _stop_free(text: str, stop: Sequence[str]) -> int:
    """Where a stop string could still begin in ``text`` as it grows: before that, no stop string can cut."""
    end = len(text)
    for s in stop:
        for k in range(min(len(s) - 1, len(text)), 0, -1):  # the longest end of the text that begins s
            if text.endswith(s[:k]):
                end = min(end, len(text) - k)
                break
    return end


def event(payload: dict[str, Any]) -> bytes:
    """One Server-Sent Event holding ``payload`` as JSON."""
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


def completion_chunk(head: dict[str, Any], index: int, text: str, finish_reason: str | None) -> dict[str, Any]:
    """A /v1/completions chunk: ``head`` is id, object, created, model (and usage: null when asked for)."""
    return {**head, "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}]}


def chat_chunk(head: dict[str, Any], index: int, delta: dict[str, str], finish_reason: str | None) -> dict[str, Any]:
    """A /v1/chat/completions chunk (``chat.completion.chunk``)."""
    return {**head, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
