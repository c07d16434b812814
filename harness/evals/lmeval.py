"""The lm-eval side of a run: the command line, and reading its per-sample logs back as items.

lm-eval runs fully offline (``OFFLINE_ENV``) and sends each batch of prompts in one request with no
concurrency, so the engine always sees the same batches in the same order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Mapping, Sequence

from harness.evals.paths import TASKS_DIR
from harness.evals.results import ItemResult
from harness.evals.suites import SuiteSpec

OFFLINE_ENV = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def lm_eval_command(base_url: str, suites: Sequence[SuiteSpec], limits: Mapping[str, int], out: Path, model_name: str,
                    batch_size: int, cache: Path | None = None) -> list[str]:
    samples = {s.task: list(range(limits[s.name])) for s in suites}
    model_args = (f"model={model_name},base_url={base_url.rstrip('/')}/v1/completions,tokenizer_backend=None,"
                  f"tokenized_requests=False,num_concurrent=1,max_retries=1,timeout=1800")
    return [sys.executable, "-m", "lm_eval", "run", "--model", "local-completions", "--model_args", model_args,
            "--tasks", ",".join(s.task for s in suites), "--include_path", str(TASKS_DIR),
            "--samples", json.dumps(samples), "--batch_size", str(batch_size), "--log_samples",
            "--output_path", str(out), "--seed", "0,0,0,0", *(["--use_cache", str(cache)] if cache else [])]


def parse_samples(path: Path, suite: SuiteSpec) -> list[ItemResult]:
    """Only the suite's primary filter counts: every other filter repeats the same items."""
    items = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("filter") != suite.primary_filter:
            continue
        args = record["arguments"]
        prompt = (args.get("gen_args_0") or next(iter(args.values())))["arg_0"] if isinstance(args, dict) else args[0][0]
        response = record["resps"][0][0]
        extracted = record["filtered_resps"][0]
        items.append(ItemResult(
            item_id=f"{suite.name}/{record['doc_id']}",
            prompt=prompt,
            gold=str(record["target"]),
            response=response,
            extracted=None if extracted in ("[invalid]", None) else str(extracted),
            correct=bool(record["exact_match"]),
        ))
    return sorted(items, key=lambda i: int(i.item_id.rsplit("/", 1)[1]))


def find_samples(out: Path, task: str) -> Path | None:
    """lm-eval nests its logs under model- and time-named folders; the newest log wins."""
    found = sorted(out.rglob(f"samples_{task}_*.jsonl"))
    return found[-1] if found else None
