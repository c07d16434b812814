"""The accuracy suites an eval can run: each one lm-eval task of ``suites/accuracy``."""

from __future__ import annotations

from dataclasses import dataclass

from harness.paths import DATA_DIR


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    task: str  # the lm-eval task name in suites/accuracy
    primary_filter: str  # the filter whose exact match decides correctness
    default_limit: int


# Defaults score the whole frozen test sets: at N = 100 a clean AIME-style run cannot vouch for a drop
# under 5 pp (MDE 7.8 pp with no discordant pairs: AMBER), at N = 200 it can (3.9 pp), but only up to
# 2 discordant pairs (3 give 5.2 pp: AMBER). GSM-style at N = 500: 1.6 pp, AMBER from 51 pairs.
SUITES = {
    "gsm_style": SuiteSpec("gsm_style", "swa_gsm_style", "strict-match", 500),
    "aime_style": SuiteSpec("aime_style", "swa_aime_style", "strict-match", 200),
}


def set_size(spec: SuiteSpec) -> int:
    """Items in the suite's frozen test set (the default limit when the set is not shipped here)."""
    path = DATA_DIR / spec.name / "test.jsonl"
    if not path.is_file():
        return spec.default_limit
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())
