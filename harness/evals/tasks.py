"""The frozen accuracy tasks an eval can run: each one lm-eval task of ``suites/accuracy``.

Naming: a *task* is a set of lm-eval items scored together (GSM-style, AIME-style); a *suite* is a set of
pytest tests (``suites/``, the kill matrix). Runs, comparisons and the report speak of tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harness.paths import DATA_DIR

Output = Literal["generate_until", "multiple_choice"]  # lm-eval's output types the jobs read


@dataclass(frozen=True)
class TaskSpec:
    name: str
    lm_eval_task: str  # the lm-eval task name in suites/accuracy
    primary_filter: str  # the filter whose exact match decides correctness
    default_limit: int
    output: Output = "generate_until"  # multiple_choice: each choice scored by its loglikelihood (echo requests)


# Defaults score the whole frozen test sets: at N = 100 a clean AIME-style run cannot vouch for a drop
# under 5 pp (MDE 7.8 pp with no discordant pairs: AMBER), at N = 200 it can (3.9 pp), but only up to
# 2 discordant pairs (3 give 5.2 pp: AMBER). GSM-style at N = 500: 1.6 pp, AMBER from 51 pairs.
FROZEN_TASKS = {
    "gsm_style": TaskSpec("gsm_style", lm_eval_task="swa_gsm_style", primary_filter="strict-match", default_limit=500),
    "aime_style": TaskSpec(
        "aime_style", lm_eval_task="swa_aime_style", primary_filter="strict-match", default_limit=200
    ),
}


# Scored by loglikelihood, not generated: each choice's tokens echoed with their logprobs (``echo``, ``max_tokens`` 0 or
# 1), the pick the most likely choice. Never in the main job (an echo is one prefill: no graph, no cache read); a plan
# names it to compare arms paired on per-choice loglikelihoods (suites/plans/cpu-choice.yaml).
LOGLIKELIHOOD_TASKS = {
    "choice_style": TaskSpec(
        "choice_style",
        lm_eval_task="swa_choice_style",
        primary_filter="none",
        default_limit=12,
        output="multiple_choice",
    ),
}


def frozen_spec(name: str) -> TaskSpec:
    """A frozen task of either kind by name; KeyError names the known ones."""
    known = {**FROZEN_TASKS, **LOGLIKELIHOOD_TASKS}
    if name not in known:
        raise KeyError(f"{name!r} is no frozen task ({', '.join(known)})")
    return known[name]


def set_size(spec: TaskSpec) -> int:
    """Items in the task's frozen test set (the default limit when the set is not shipped here)."""
    path = DATA_DIR / spec.name / "test.jsonl"
    if not path.is_file():
        return spec.default_limit
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())
