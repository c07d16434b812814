"""check: the message similarity at or above which `swa-harness check` names a catalog fault, calibrated from data.

Two distributions, over the kill matrices of every target (the harness, SGLang, vLLM):

- **a match** (a rerun of the same fault): each fault's kill message in the committed matrix against its message in
  another run of the same fault killed by the same test: every earlier version of the matrix in git history, and any
  other run given with ``--also`` (e.g. a shard or a try run kept under /tmp);
- **a non-match** (leave one out): each fault's kill message in the committed matrix against every *other* fault's
  kill messages in the same matrix, its best similarity (what a failure of that fault would score against the rest
  of the catalog were it left out of it).

The threshold is the midpoint between the 1st percentile of the matches and the highest non-match below it, rounded
down to 0.01: 99 % of reruns are named, and every non-match below them is not. Non-matches at or above it are
listed: faults whose kill messages say the same thing (siblings). Alternative measures are scored by the same rule,
to show whether another would separate better.
The chosen value must equal ``MATCH_THRESHOLD`` in harness/jobs/check.py (exit 1 otherwise).

    python -m bench.check_threshold [--also /tmp/km-sg56.json ...]
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from bench.common import markdown_table, write_section
from harness.jobs.check import VOLATILE_TOKENS, MATCH_THRESHOLD, message_similarity
from harness.kill_record import Failure, KillMatrix
from harness.paths import REPO

COMMITTED = {
    "harness": "reports/kill-matrix.json",
    "sglang": "reports/kill-matrix-sglang.json",
    "vllm": "reports/kill-matrix-vllm.json",
}
Measure = Callable[[str, str], float]


def _raw(a: str, b: str) -> float:  # check's measure before the calibration
    return difflib.SequenceMatcher(None, a[:300], b[:300]).ratio()


def _raw_junkless(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a[:300], b[:300], autojunk=False).ratio()


def _masked_with_autojunk(a: str, b: str) -> float:
    masked = [VOLATILE_TOKENS.sub("#", t)[:300] for t in (a, b)]
    return difflib.SequenceMatcher(None, *masked).ratio()


MEASURES: dict[str, Measure] = {
    "numbers, digests, addresses masked; difflib ratio without autojunk (check's)": message_similarity,
    "the same with difflib's autojunk": _masked_with_autojunk,
    "nothing masked, without autojunk": _raw_junkless,
    "nothing masked, difflib ratio as check had it": _raw,
}


@dataclass(frozen=True)
class Kill:
    target: str
    fault: str
    failure: Failure


def kills(matrix: KillMatrix, target: str) -> list[Kill]:
    return [
        Kill(target, row.spec.id, cell.failure)
        for row in matrix.faults
        for cell in row.cells.values()
        if cell.status == "killed" and cell.failure is not None
    ]


def same_test(a: Failure, b: Failure) -> bool:
    return a.is_test(b.nodeid) or b.is_test(a.nodeid)


def history(path: str) -> list[tuple[str, KillMatrix]]:
    """Every committed version of ``path`` other than the one in the tree (newest first), each named by its commit."""
    revs = subprocess.run(
        ["git", "log", "--format=%h", "--", path], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    out = []
    for rev in revs:
        text = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=REPO, capture_output=True, text=True).stdout
        if text.strip() and text != (REPO / path).read_text():
            out.append((f"{path}@{rev}", KillMatrix.from_json(json.loads(text))))
    return out


def rerun_pairs(
    committed: dict[str, list[Kill]], reruns: Iterable[tuple[str, str, KillMatrix]]
) -> tuple[list[tuple[Kill, Kill, str]], list[tuple[Kill, Kill, str]]]:
    """(same test, another test): each distinct pair of a fault's committed kill and its kill in another run."""
    same: dict[tuple, tuple[Kill, Kill, str]] = {}
    other: dict[tuple, tuple[Kill, Kill, str]] = {}
    for source, target, matrix in reruns:
        for again in kills(matrix, target):
            for kill in committed[target]:
                if kill.fault != again.fault:
                    continue
                key = (target, kill.fault, kill.failure.message, again.failure.message)
                bucket = same if same_test(kill.failure, again.failure) else other
                bucket.setdefault(key, (kill, again, source))
    return list(same.values()), list(other.values())


def non_matches(committed: dict[str, list[Kill]], sim: Measure) -> list[tuple[Kill, Kill, float]]:
    """Leave one out: each committed kill against the closest kill of another fault of its matrix."""
    out = []
    for target_kills in committed.values():
        for kill in target_kills:
            others = [k for k in target_kills if k.fault != kill.fault]
            if others:
                score, nearest = max(((sim(kill.failure.message, k.failure.message), k) for k in others), key=_first)
                out.append((kill, nearest, score))
    return out


def _first(pair: tuple[float, Kill]) -> float:
    return pair[0]


def low_match(matches: list[float]) -> float:
    """The 1st percentile of the matches: 99 % of reruns score at or above it (a rerun whose test's assertion was
    rewritten between the two runs is a different message, not a rerun's noise)."""
    ordered = sorted(matches)
    return ordered[int(len(ordered) * 0.01)]


def choose(matches: list[float], non: list[float]) -> float:
    """The midpoint between the 1st-percentile match and the highest non-match below it, rounded down to 0.01."""
    low = low_match(matches)
    below = [x for x in non if x < low]
    return math.floor((low + max(below, default=0.0)) / 2 * 100) / 100


def _bins(values: list[float]) -> list[int]:
    return [sum(1 for v in values if lo / 10 <= v < (lo + 1) / 10 or (lo == 9 and v == 1.0)) for lo in range(10)]


def _reruns(also: list[str]) -> list[tuple[str, str, KillMatrix]]:
    out = [(source, target, matrix) for target, path in COMMITTED.items() for source, matrix in history(path)]
    for extra in also:
        data = json.loads(Path(extra).read_text())
        if isinstance(data, dict) and data.get("target") in COMMITTED and "faults" in data:
            out.append((extra, data["target"], KillMatrix.from_json(data)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--also", nargs="*", default=[], help="other kill matrix runs (JSON) of the same catalogs")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs/BENCHMARKS.md alone")
    args = parser.parse_args()
    committed = {t: kills(KillMatrix.from_json(json.loads((REPO / p).read_text())), t) for t, p in COMMITTED.items()}
    same, other = rerun_pairs(committed, _reruns(args.also))
    measures = []
    for name, sim in MEASURES.items():
        matches = [sim(a.failure.message, b.failure.message) for a, b, _ in same]
        non = [score for _, _, score in non_matches(committed, sim)]
        t = choose(matches, non)
        measures.append(
            [name, f"{min(matches):.2f}", f"{low_match(matches):.2f}", f"{t:.2f}"]
            + [f"{sum(m >= t for m in matches)}/{len(matches)}", f"{sum(x >= t for x in non)}/{len(non)}"]
        )
    matches = [message_similarity(a.failure.message, b.failure.message) for a, b, _ in same]
    non = non_matches(committed, message_similarity)
    scores = [s for _, _, s in non]
    threshold, low = choose(matches, scores), low_match(matches)
    bins = ["0-0.1", "0.1-0.2", "0.2-0.3", "0.3-0.4", "0.4-0.5", "0.5-0.6", "0.6-0.7", "0.7-0.8", "0.8-0.9", "0.9-1"]
    siblings = sorted(((s, k, n) for k, n, s in non if s >= threshold), key=lambda x: -x[0])
    unnamed = [(round(m, 3), a.fault) for m, (a, _, _) in zip(matches, same, strict=True) if m < 0.9]
    elsewhere: dict[tuple[str, str, str], list[float]] = {}
    for a, b, _ in other:
        key = (a.fault, a.failure.test, b.failure.test)
        elsewhere.setdefault(key, []).append(message_similarity(a.failure.message, b.failure.message))
    body = "\n".join(
        [
            f"Kill messages of the committed matrices: {sum(len(v) for v in committed.values())} kills ("
            + ", ".join(f"{len(v)} {t}" for t, v in committed.items())
            + "). Reruns: every other committed version of each matrix in git history"
            + (f", and {', '.join(f'`{a}`' for a in args.also)}" if args.also else "")
            + f": {len(same)} distinct pairs of one fault's committed kill message and its message in another run,"
            " killed by the same test. A rerun does not give the same message: digests, object addresses and the"
            " numbers a property test drew change, which is why check's measure masks them.",
            "",
            "By check's measure (numbers, digests and addresses masked; difflib's ratio without autojunk over the first"
            " 300 characters):",
            "",
            markdown_table(
                ["similarity", *bins],
                [
                    [f"a match: a rerun of the fault ({len(matches)} pairs)", *_bins(matches)],
                    [f"a non-match: the closest other fault, leave one out ({len(scores)} kills)", *_bins(scores)],
                ],
            ),
            "",
            "Matches below 0.90: "
            + (
                "; ".join(
                    f"{f} {s:.3f} ({n} pair{'s' if n > 1 else ''})" for (s, f), n in sorted(Counter(unnamed).items())
                )
                or "none"
            )
            + ".",
            "",
            f"**Chosen: {threshold:.2f}** (`MATCH_THRESHOLD` in `harness/jobs/check.py`): the midpoint between the 1st"
            f" percentile of the matches ({low:.3f}) and the highest non-match below it"
            f" ({max((x for x in scores if x < low), default=0.0):.3f}), rounded down. Reruns named:"
            f" {sum(m >= threshold for m in matches)} of {len(matches)}; non-matches named:"
            f" {len(siblings)} of {len(scores)}, every one a sibling fault failing the same assertion (check names the"
            " closest and lists the others at or above the threshold as close):",
            "",
            markdown_table(
                ["kill of", "closest other fault", "similarity", "same test"],
                [
                    [f"{k.target} {k.fault}", n.fault, f"{s:.2f}", "yes" if same_test(k.failure, n.failure) else "no"]
                    for s, k, n in siblings
                ],
            ),
            "",
            "Reruns killed by another test (no message measure can name these; check's killers stage runs the catalog's"
            " killers in its own order, so a catalog fault usually fails at its own killer): "
            + (
                "; ".join(
                    f"{fid} `{t1}` vs `{t2}` {min(v):.2f}-{max(v):.2f} ({len(v)} pairs)"
                    for (fid, t1, t2), v in elsewhere.items()
                )
                or "none"
            )
            + ".",
            "",
            "Other measures, each with its threshold chosen by the same rule:",
            "",
            markdown_table(
                ["measure", "lowest match", "1st-percentile match", "threshold", "reruns named", "non-matches named"],
                measures,
            ),
            "",
            "Masking is what separates: it lifts the reruns' 1st percentile from 0.50 to 0.84, and the non-matches"
            " named at each measure's threshold fall from 31 to 19, the siblings. Autojunk is left off though it names two fewer non-matches here: for a message of 200"
            " characters or more difflib ignores every character found in over 1 % of its positions, so the measure"
            " changes with the message's length, and it put the rerun pair whose assertion was rewritten (the lowest"
            " match) at 0.25.",
        ]
    )
    print(body)
    if not args.no_write:
        write_section(
            "check-threshold",
            "check: catalog match threshold",
            "python -m bench.check_threshold" + "".join(f" --also {a}" for a in args.also),
            body,
        )
    if threshold != MATCH_THRESHOLD:
        print(f"\nharness/jobs/check.py has MATCH_THRESHOLD = {MATCH_THRESHOLD}: set it to {threshold:.2f}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
