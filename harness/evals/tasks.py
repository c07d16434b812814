"""The frozen accuracy tasks an eval can run: each one lm-eval task of ``suites/accuracy``.

Naming: a *task* is a set of lm-eval items scored together (GSM-style, AIME-style); a *suite* is a set of
pytest tests (``suites/``, the kill matrix). Runs, comparisons and the report speak of tasks.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.paths import DATA_DIR


@dataclass(frozen=True)
class TaskSpec:
    name: str
    lm_eval_task: str  # the lm-eval task name in suites/accuracy
    primary_filter: str  # the filter whose exact match decides correctness
    default_limit: int


# Defaults score the whole frozen test sets: at N = 100 a clean AIME-style run cannot vouch for a drop
# under 5 pp (MDE 7.8 pp with no discordant pairs: AMBER), at N = 200 it can (3.9 pp), but only up to
# 2 discordant pairs (3 give 5.2 pp: AMBER). GSM-style at N = 500: 1.6 pp, AMBER from 51 pairs.
FROZEN_TASKS = {
    "gsm_style": TaskSpec("gsm_style", lm_eval_task="swa_gsm_style", primary_filter="strict-match", default_limit=500),
    "aime_style": TaskSpec(
        "aime_style", lm_eval_task="swa_aime_style", primary_filter="strict-match", default_limit=200
    ),
}


def set_size(spec: TaskSpec) -> int:
    """Items in the task's frozen test set (the default limit when the set is not shipped here)."""
    path = DATA_DIR / spec.name / "test.jsonl"
    if not path.is_file():
        return spec.default_limit
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())
