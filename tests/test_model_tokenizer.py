"""Tokenizer wrapper over tokenizer.json plus the HF side files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import models, pre_tokenizers, processors

from harness.model import CheckpointError, Tokenizer, load_tokenizer

VOCAB = {"<pad>": 0, "<eos>": 1, "<bos>": 2, "[UNK]": 3, "hello": 4, "world": 5, "<end_of_turn>": 6}


def _write(
    path: Path,
    *,
    bos_post_processor: bool,
    tokenizer_config: dict | None = None,
    config: dict | None = None,
    generation_config: dict | None = None,
) -> Path:
    path.mkdir()
    tok = HFTokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<pad>", "<eos>", "<bos>", "<end_of_turn>"])
    if bos_post_processor:
        tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
    tok.save(str(path / "tokenizer.json"))
    for name, content in (
        ("tokenizer_config.json", tokenizer_config),
        ("config.json", config),
        ("generation_config.json", generation_config),
    ):
        if content is not None:
            (path / name).write_text(json.dumps(content))
    return path


def test_post_processor_bos_is_not_doubled(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t",
        bos_post_processor=True,
        tokenizer_config={"bos_token": "<bos>", "eos_token": "<eos>", "add_bos_token": True},
    )
    tok = load_tokenizer(path)
    assert tok.encode("hello world") == [2, 4, 5]
    assert tok.encode("") == [2]


def test_add_bos_token_without_post_processor(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t",
        bos_post_processor=False,
        tokenizer_config={"bos_token": {"content": "<bos>", "special": True}, "add_bos_token": True},
    )
    tok = Tokenizer.from_dir(path)
    assert tok.bos_token_id == 2
    assert tok.encode("hello world") == [2, 4, 5]
    assert tok.encode("<bos> hello") == [2, 4]  # already there: not doubled


def test_no_bos_when_not_asked(tmp_path: Path) -> None:
    path = _write(tmp_path / "t", bos_post_processor=False, tokenizer_config={"bos_token": "<bos>"})
    assert load_tokenizer(path).encode("hello world") == [4, 5]


def test_decode_drops_special_tokens_by_default(tmp_path: Path) -> None:
    tok = load_tokenizer(_write(tmp_path / "t", bos_post_processor=True))
    assert tok.decode([2, 4, 5, 1]) == "hello world"
    assert tok.decode([2, 4, 5, 1], skip_special_tokens=False) == "<bos> hello world <eos>"
    assert tok.decode(tok.encode("world hello")) == "world hello"


def test_eos_ids_from_all_side_files(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "t",
        bos_post_processor=True,
        tokenizer_config={"eos_token": "<eos>", "pad_token": "<pad>"},
        config={"eos_token_id": [1, 6]},
        generation_config={"eos_token_id": 6},
    )
    tok = load_tokenizer(path)
    assert tok.eos_token_ids == (1, 6)
    assert tok.pad_token_id == 0
    assert tok.vocab_size == len(VOCAB)


def test_eos_id_as_int_and_missing_files(tmp_path: Path) -> None:
    tok = load_tokenizer(_write(tmp_path / "t", bos_post_processor=False, generation_config={"eos_token_id": 6}))
    assert tok.eos_token_ids == (6,)
    assert tok.bos_token_id is None and tok.pad_token_id is None


def test_missing_tokenizer_json(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        load_tokenizer(tmp_path)
