"""lm-eval's per-sample logs read back as items: what each server answered and whether it was right."""

from __future__ import annotations

import json
from pathlib import Path

from harness.evals.results import ItemResult
from harness.evals.tasks import TaskSpec


def parse_samples(path: Path, task: TaskSpec) -> list[ItemResult]:
    """Only the task's primary filter counts: every other filter repeats the same items."""
    items = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("filter") != task.primary_filter:
            continue
        args = record["arguments"]
        prompt = (
            (args.get("gen_args_0") or next(iter(args.values())))["arg_0"] if isinstance(args, dict) else args[0][0]
        )
        response = record["resps"][0][0]
        extracted = record["filtered_resps"][0]
        items.append(
            ItemResult(
                item_id=f"{task.name}/{record['doc_id']}",
                prompt=prompt,
                gold=str(record["target"]),
                response=response,
                extracted=None if extracted in ("[invalid]", None) else str(extracted),
                correct=bool(record["exact_match"]),
            )
        )
    return sorted(items, key=lambda i: int(i.item_id.rsplit("/", 1)[1]))


def find_samples(out: Path, task: str) -> Path | None:
    """lm-eval nests its logs under model- and time-named folders; the newest log wins."""
    found = sorted(out.rglob(f"samples_{task}_*.jsonl"))
    return found[-1] if found else None
