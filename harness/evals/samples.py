"""lm-eval's per-sample logs read back as items: what each server answered and whether it was right."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.evals.results import ChoiceScore, ItemResult
from harness.evals.tasks import TaskSpec

CountTokens = Callable[[str, str], int]  # (context, continuation) -> the continuation's tokens after the context


def parse_samples(path: Path, task: TaskSpec, count_tokens: CountTokens | None = None) -> list[ItemResult]:
    """Only the task's primary filter counts: every other filter repeats the same items. A multiple-choice task's
    items carry their choices' scores (``count_tokens`` gives each choice's length; without it, 0)."""
    items = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record.get("filter") != task.primary_filter:
            continue
        if task.output == "multiple_choice":
            items.append(_choice_item(record, task, count_tokens))
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


def _choice_item(record: dict[str, Any], task: TaskSpec, count_tokens: CountTokens | None) -> ItemResult:
    """One multiple-choice sample: per choice lm-eval's (loglikelihood, is_greedy) and its (context, continuation);
    the pick is the most likely choice (lm-eval's ``acc``), the first of equals as lm-eval's argmax takes it."""
    pairs = [_pair(a) for a in _arguments(record["arguments"])]
    scored = [resp[0] if isinstance(resp[0], (list, tuple)) else resp for resp in record["resps"]]
    if len(scored) != len(pairs):
        raise ValueError(f"{task.name} item {record['doc_id']}: {len(scored)} scores for {len(pairs)} choices")
    choices = tuple(
        ChoiceScore(
            loglikelihood=float(ll),
            greedy=str(greedy) == "True" if isinstance(greedy, str) else bool(greedy),
            tokens=count_tokens(context, continuation) if count_tokens else 0,
        )
        for (ll, greedy), (context, continuation) in zip(scored, pairs)
    )
    pick = max(range(len(choices)), key=lambda c: choices[c].loglikelihood)
    return ItemResult(
        item_id=f"{task.name}/{record['doc_id']}",
        prompt=pairs[0][0],
        gold=str(record["target"]),
        response=pairs[pick][1],
        extracted=str(pick),
        correct=bool(record["acc"]),
        choices=choices,
    )


def _arguments(args: Any) -> Sequence[Any]:
    """The per-choice requests, however lm-eval's version lays them out (``gen_args_<i>`` keys, or a list)."""
    if isinstance(args, dict):
        return [args[k] for k in sorted(args, key=lambda k: int(k.rsplit("_", 1)[1]))]
    return list(args)


def _pair(args: Any) -> tuple[str, str]:
    """One request's (context, continuation)."""
    if isinstance(args, dict):
        args = [args[k] for k in sorted(args)]
    return str(args[0]), str(args[1])


def find_samples(out: Path, task: str) -> Path | None:
    """lm-eval nests its logs under model- and time-named folders; the newest log wins."""
    found = sorted(out.rglob(f"samples_{task}_*.jsonl"))
    return found[-1] if found else None
