"""The dataset loader of ``choice_style.yaml`` (``custom_dataset: !function choice_utils.load_choice_style``).

Apart from ``utils.py`` (the GSM- and AIME-style loaders): a frozen task's resume key holds the helper its YAML names
(``harness/jobs/recording.py:dataset_hashes``), so an edit here misses choice_style's key alone. lm-eval imports this
file by path, so it is self-contained.
"""

from __future__ import annotations

import json
from pathlib import Path

import datasets

DATA = Path(__file__).resolve().parents[2] / "fixtures" / "data" / "choice_style" / "test.jsonl"


def load_choice_style(**kwargs) -> datasets.DatasetDict:
    with open(DATA, encoding="utf-8") as f:
        docs = [json.loads(line) for line in f if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})
