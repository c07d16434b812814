"""Draft tokens for speculative decoding without a draft model: prompt lookup (SGLang's and vLLM's n-gram
speculation). The last few tokens of a request are looked up earlier in its own prompt and output; what
followed their latest earlier occurrence is the guess. Text that repeats (code, quoted context, the
worked examples of a few-shot prompt) gets long accepted runs; anything else gets few or no drafts,
which costs one verify of width 1, a plain decode step."""

from __future__ import annotations

from collections.abc import Sequence


def propose_drafts(tokens: Sequence[int], k: int, max_ngram: int = 3) -> list[int]:
    """Up to ``k`` tokens that followed the latest earlier occurrence of the longest suffix (``max_ngram``
    tokens down to 1) of ``tokens``; none when no suffix occurred before."""
    if k <= 0:
        return []
    n_tokens = len(tokens)
    for n in range(min(max_ngram, n_tokens - 1), 0, -1):
        suffix = list(tokens[n_tokens - n :])
        for start in range(n_tokens - n - 1, -1, -1):  # the latest occurrence that ends before the suffix
            if list(tokens[start : start + n]) == suffix:
                return list(tokens[start + n : start + n + k])
    return []
