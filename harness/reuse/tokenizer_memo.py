"""The tokenizer a report splits flips with, memoised per process (one per checkpoint, read again when its
tokenizer.json changes)."""

from __future__ import annotations

from pathlib import Path

from harness.evals.compare import Tokenize
from harness.fingerprint import tokenizer_fingerprint
from harness.seams import seam


class TokenizerMemo:
    """Loaded tokenizers, one per checkpoint for the life of the process (a report splits every flip with one)."""

    loaded: dict[tuple[str, str | None], Tokenize] = {}

    @seam("tokenizer-memo-keyed-by-folder")
    @staticmethod
    def key(path: str) -> tuple[str, str | None]:
        """The folder and the bytes of its tokenizer.json: a checkpoint rewritten in place is another tokenizer."""
        return path, tokenizer_fingerprint(path)


def memoized_tokenize(path: str) -> Tokenize:
    """The checkpoint's tokenizer as a text -> token strings function, loaded once per (folder, tokenizer.json)."""
    key = TokenizerMemo.key(path)
    if key not in TokenizerMemo.loaded:
        from harness.model import Tokenizer  # imported here: harness.model pulls in torch, needed only for this

        tok = Tokenizer.from_dir(Path(path))
        TokenizerMemo.loaded[key] = lambda text: [
            tok.decode([i]) for i in tok.tokenizer.encode(text, add_special_tokens=False).ids
        ]
    return TokenizerMemo.loaded[key]
