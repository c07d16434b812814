"""Thin wrapper over a `tokenizers` tokenizer.json plus the HF side files.

Only what the harness needs: encode with exactly one BOS, decode, and the full
set of ids that end generation (tokenizer_config, config.json and
generation_config.json may each name some, as an int or a list).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as _HFTokenizer

from harness.model.errors import CheckpointError


class Tokenizer:
    """Encode/decode with an HF fast-tokenizer file."""

    def __init__(
        self,
        tokenizer: _HFTokenizer,
        bos_token_id: int | None = None,
        eos_token_ids: Sequence[int] = (),
        pad_token_id: int | None = None,
        add_bos_token: bool = False,
    ):
        self.tokenizer = tokenizer
        self.bos_token_id = bos_token_id
        self.eos_token_ids = tuple(dict.fromkeys(eos_token_ids))
        self.pad_token_id = pad_token_id
        self.add_bos_token = add_bos_token

    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        """Read ``tokenizer.json`` and, when present, ``tokenizer_config.json``,
        ``config.json`` and ``generation_config.json`` from `path`."""
        path = Path(path)
        if not (path / "tokenizer.json").is_file():
            raise CheckpointError(f"no tokenizer.json in {path}")
        tok = _HFTokenizer.from_file(str(path / "tokenizer.json"))
        tcfg = _read_json(path / "tokenizer_config.json")

        def token_id(field: str) -> int | None:
            token = tcfg.get(field)
            if isinstance(token, dict):  # serialized AddedToken
                token = token.get("content")
            return None if token is None else tok.token_to_id(token)

        eos: list[int] = []
        if (tid := token_id("eos_token")) is not None:
            eos.append(tid)
        for side in ("config.json", "generation_config.json"):
            eos.extend(_as_ids(_read_json(path / side).get("eos_token_id")))
        return cls(
            tok,
            bos_token_id=token_id("bos_token"),
            eos_token_ids=eos,
            pad_token_id=token_id("pad_token"),
            add_bos_token=bool(tcfg.get("add_bos_token", False)),
        )

    def encode(self, text: str) -> list[int]:
        """Token ids with the tokenizer's special tokens and exactly one leading BOS.

        tokenizer.json's post-processor may already add BOS; `add_bos_token` from
        tokenizer_config.json only adds one when it is not already there.
        """
        ids = self.tokenizer.encode(text, add_special_tokens=True).ids
        bos = self.bos_token_id
        if self.add_bos_token and bos is not None and (not ids or ids[0] != bos):
            ids = [bos, *ids]
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text for `ids`; special tokens (BOS/EOS/...) dropped by default, as servers do."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)


def load_tokenizer(path: str | Path) -> Tokenizer:
    return Tokenizer.from_dir(path)


def _read_json(file: Path) -> dict[str, Any]:
    return json.loads(file.read_text()) if file.is_file() else {}


def _as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, list) else [value])]
