"""Dataset loaders for the accuracy task YAMLs (``custom_dataset: !function utils.load_*``).

lm-eval imports this file by path, so it is self-contained: it reads the frozen JSONL test sets and
few-shot pools shipped in ``fixtures/data`` relative to this file.
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets

DATA_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "data"


def _load(task: str) -> datasets.DatasetDict:
    splits = {}
    for split in ("test", "fewshot"):
        with open(DATA_DIR / task / f"{split}.jsonl", encoding="utf-8") as f:
            splits[split] = datasets.Dataset.from_list([json.loads(line) for line in f if line.strip()])
    return datasets.DatasetDict(splits)


def load_gsm_style(**kwargs) -> datasets.DatasetDict:
    return _load("gsm_style")


def load_aime_style(**kwargs) -> datasets.DatasetDict:
    return _load("aime_style")
