"""Wall time of the README's main job (``swa-harness eval`` on the shipped checkpoint, CPU) and where it goes.

Runs the job exactly as the README does (both suites, graphs on and off side by side), into a
scratch folder, then reads each run's own timings: server start (model load and, with graphs on,
capture of every bucket), lm-eval's wall time, and the engine's busy time inside ``engine.step``
(from the server's /health counters).

    python -m bench.bench_accuracy
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.common import markdown_table, write_section
from harness.evals.results import RunResult
from harness.jobs.eval_cli import main as eval_main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("eval_args", nargs="*", help="extra arguments for swa-harness eval")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        code = eval_main(["--out", tmp, "--kill-matrix", str(Path(tmp) / "none.json"), *args.eval_args])
        wall = time.perf_counter() - start
        runs = [RunResult.load(p) for p in sorted(Path(tmp).rglob("runs/*.json"))]  # <model>/<arm>/runs/<task>.json
    if code != 0:
        raise SystemExit(f"the main job exited with {code}; no timing recorded")
    arms: dict[str, RunResult] = {}
    items: dict[str, int] = {}
    for run in runs:  # an arm's last saved task: its wall time covers every lm-eval step of the arm
        if run.record.arm not in arms or run.wall_s >= arms[run.record.arm].wall_s:
            arms[run.record.arm] = run
        items[run.task] = len(run.items)
    rows = []
    for label in ("on", "off"):
        run = arms[label]
        start = run.record.start_s or 0.0
        engine = run.record.counters or {}
        rows.append(
            [
                f"{label} ({run.graphs})",
                start,
                f"{run.wall_s - start:.1f}",  # the run's lm-eval steps: nothing records them apart
                f"{engine['engine_busy_s']:.1f}",
                engine["steps"],
                engine["generated_tokens"],
                f"{engine['generated_tokens'] / engine['engine_busy_s']:.0f}",
                run.wall_s,
            ]
        )
    table = markdown_table(
        [
            "graphs",
            "server start s",
            "lm-eval s",
            "engine busy s",
            "engine steps",
            "generated tokens",
            "tokens / engine s",
            "mode wall s",
        ],
        rows,
    )
    print(table, f"\njob wall time: {wall:.1f} s", sep="\n")
    write_section(
        "accuracy",
        "Main job: accuracy suites with graphs on and off (CPU)",
        "python -m bench.bench_accuracy" + ("" if not args.eval_args else " " + " ".join(args.eval_args)),
        f"`swa-harness eval` on the shipped checkpoint, items {items}, both modes side by side (one server "
        f"each, 1 torch thread each), lm-eval `local-completions` with 32 prompts per request.\n\n"
        f"**Whole job: {wall:.0f} s** (goal: under 5 minutes).\n\n{table}\n\n"
        "Server start = model load + (graphs on) tape capture of every (batch, KV-length) bucket. "
        "lm-eval s is the arm's wall time less its server's start (lm-eval's own start-up and dataset building "
        "included); the engine is busy for the rest.",
    )


if __name__ == "__main__":
    main()
