"""The fault-effect table: what each behavioural fault does to the accuracy suites, on both shipped checkpoints.

For every checkpoint, one clean ``swa-harness eval`` (no fault: the baseline) and one
``swa-harness eval --fault ID`` per behavioural catalog fault (``expected_kill == "behavioural"``),
run one at a time (each eval already runs its graphs-on and graphs-off servers side by side). Each
eval's saved runs (``<out>/<model>/<on|off>/runs/<suite>.json``, found through its ``plan.json``) are compared paired again here with the
eval's own code and thresholds (``harness.jobs.judging.judge`` over the plan it saved), so the numbers are the ones its
summary printed; the eval's exit code is checked against them (1 exactly when a suite is RED).

Writes ``docs/fault-effects.json`` (rows ``{fault, checkpoint, suite, on_accuracy, off_accuracy,
delta_pp, p_value, flips, verdict}``; accuracies are fractions, ``delta_pp`` is ON − OFF in
percentage points, ``p_value`` McNemar's exact, ``flips`` the items scored differently; the clean
baseline rows have ``fault == "clean"``), which the HTML report renders, and ``docs/FAULT_EFFECTS.md``
(the table, the command, limits, machine, wall time, and per fault what accuracy alone would miss,
read against the kill matrix).

    python -m bench.fault_effects                      # both checkpoints, every behavioural fault
    python -m bench.fault_effects --models fixtures/models/gemma2-tiny-swa --faults pad-swa-loc-not-zeroed

Eval outputs go under ``--work`` (default ``/tmp/swa-fault-effects``), not into the checkout: each
eval's folder holds its runs, ``eval.log`` and ``outcome.json`` (exit code, wall time, command), and
``manifest.json`` records the whole run (command, limits, machine, wall time), so
``python -m bench.fault_effects --render-only`` re-writes the two docs from a finished run without
running anything. Greedy decoding and a fixed bootstrap seed (``--seed``) make a rerun give the same
table.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from harness import kill_record
from harness.evals.compare import Thresholds
from harness.evals.tasks import FROZEN_TASKS
from harness.evals.results import TaskComparison
from harness.jobs.judging import judge, load_runs
from harness.jobs.saved import plan_from_inputs
from harness.kill_record import FaultRow
from harness.paths import DEFAULT_KILL_MATRIX, REPO

from bench.fault_reach import NO_ARM_WHY, NO_PLAN_WHY, LogitReach, baseline_items, logit_reach

MODELS = ("fixtures/models/gemma2-tiny-swa", "fixtures/models/gemma3-tiny-swa")
SUITES = ("gsm_style", "aime_style")
SUITE_LABEL = {"gsm_style": "GSM-style", "aime_style": "AIME-style"}
CLEAN = "clean"
DOCS_JSON = REPO / "docs" / "fault-effects.json"
DOCS_MD = REPO / "docs" / "FAULT_EFFECTS.md"
ROW_KEYS = (
    "fault",
    "checkpoint",
    "suite",
    "on_accuracy",
    "off_accuracy",
    "delta_pp",
    "p_value",
    "flips",
    "verdict",
    "n",
    "measured_at",
    "logprob_verdict",
    "logprob_max_delta",
    "logprob_max_kl",
    "logprob_parted",
    "logits_changed",
)  # n: items paired; measured_at: the run's start date (the report labels the table); logprob_*: the logprob axis
# (ON vs OFF, harness.evals.logprobs); logits_changed: items whose graphs-on generation's logprobs (every top-5 of every
# token) differ from the clean eval's graphs-on arm, bit for bit (None for the clean rows): 0 means the fault changed no
# logit the job read, whatever the axis says


# Faults that live in the job's own layers (the response cache's key, the tokenizer memo, the history series), not in
# the server: an eval injects a fault into its graphs-on server, which never runs these modules, so no eval can show
# their effect; the reuse and history suites kill them (tests/test_reuse_keys.py and the kill matrix).
JOB_LAYERS = ("harness.reuse", "harness.evals.", "harness.jobs.")


def job_layer(fault_id: str) -> bool:
    """Whether every module this fault patches is one of the job's own layers (``JOB_LAYERS``)."""
    from harness.faults import FAULTS

    return all(p.owner.__module__.startswith(JOB_LAYERS) for p in FAULTS[fault_id].patches)


def behavioural_faults() -> list[str]:
    """Catalog faults whose expected kill is behavioural, in catalog order."""
    from harness.faults import FAULTS

    return [fid for fid, f in FAULTS.items() if kill_record.spec_of(f).expected_kill == "behavioural"]


@dataclass
class EvalOutcome:
    checkpoint: str
    fault: str  # CLEAN for the baseline
    exit_code: int
    wall_s: float
    command: list[str]
    out: Path
    sequential: bool
    comparisons: list[TaskComparison] = field(default_factory=list)
    error: str | None = None
    retried_after: str | None = None  # the side-by-side attempt's failure, when this is the --sequential retry
    reach: dict[str, LogitReach] = field(default_factory=dict)  # task -> against the clean eval's graphs-on arm
    checkout: dict[str, Any] | None = None  # the checkout's commit and dirty flag when the eval started

    @property
    def overall(self) -> str:
        if self.error:
            return "ERROR"
        order = {"GREEN": 0, "AMBER": 1, "RED": 2}
        return max((c.verdict.name for c in self.comparisons), key=lambda v: order.get(v, 3), default="ERROR")

    def save(self) -> None:
        (self.out / "outcome.json").write_text(
            json.dumps(
                {
                    "checkpoint": self.checkpoint,
                    "fault": self.fault,
                    "exit_code": self.exit_code,
                    "wall_s": round(self.wall_s, 1),
                    "command": self.command,
                    "sequential": self.sequential,
                    "checkout": self.checkout,
                    "error": self.error,
                    "retried_after": self.retried_after,
                },
                indent=1,
            )
            + "\n"
        )

    @classmethod
    def load(cls, out: Path, seed: int) -> EvalOutcome:
        """A finished eval from its folder: its outcome.json, and its runs compared again."""
        d = json.loads((out / "outcome.json").read_text())
        o = cls(
            d["checkpoint"],
            d["fault"],
            d["exit_code"],
            d["wall_s"],
            d["command"],
            out,
            d["sequential"],
            error=d.get("error"),
            retried_after=d.get("retried_after"),
        )
        if o.error is None:
            o.comparisons = load_comparisons(out, seed)
        return o


def eval_command(model: str, fault: str, out: Path, limits: dict[str, int], seed: int, sequential: bool) -> list[str]:
    exe = Path(sys.executable).with_name("swa-harness")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "harness.cli"]
    cmd += [
        "eval",
        "--model",
        model,
        "--out",
        str(out),
        "--seed",
        str(seed),
        "--limit-gsm-style",
        str(limits["gsm_style"]),
        "--limit-aime-style",
        str(limits["aime_style"]),
        "--no-history",
        "--no-cache-off",  # the graphs comparison alone: the table is ON vs OFF (and judge() below pairs one)
    ]
    if fault != CLEAN:
        cmd += ["--fault", fault]
    if sequential:
        cmd.append("--sequential")
    return cmd


def load_comparisons(out: Path, seed: int) -> list[TaskComparison]:
    """The eval's saved runs, paired and judged with the eval's own code and default thresholds."""
    saved = out / "plan.json"
    if not saved.is_file():
        raise FileNotFoundError(f"no saved job under {out} (plan.json missing)")
    plan = plan_from_inputs(json.loads(saved.read_text())["inputs"])
    [judged] = judge(plan, load_runs(plan), Thresholds(seed=seed))
    by_suite = {c.task: c for c in judged.tasks}
    return [by_suite[s] for s in SUITES if s in by_suite]


def run_one(
    model: str, fault: str, work: Path, limits: dict[str, int], seed: int, sequential: bool, log: Any
) -> EvalOutcome:
    name = Path(model).name
    out = work / name / fault
    out.mkdir(parents=True, exist_ok=True)
    attempts = [sequential] if sequential else [False, True]  # side by side first; sequential only if that fails
    outcome: EvalOutcome | None = None
    previous: str | None = None
    from harness.reuse import checkout_state

    checkout = checkout_state()
    for seq in attempts:
        cmd = eval_command(model, fault, out, limits, seed, seq)
        print(f"[{time.strftime('%H:%M:%S')}] {name} / {fault}: {shlex.join(cmd)}", file=log, flush=True)
        start = time.perf_counter()
        with open(out / "eval.log", "w") as f:
            code = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT).returncode
        wall = time.perf_counter() - start
        outcome = EvalOutcome(name, fault, code, wall, cmd, out, seq, retried_after=previous, checkout=checkout)
        if code in (0, 1):
            break
        lines = (out / "eval.log").read_text(errors="replace").strip().splitlines()
        failed = [line for line in lines if "FAILED" in line]  # the eval's own one-line reason for exit 2
        outcome.error = f"exit {code}: " + " | ".join(failed[-1:] or lines[-3:])
        previous = outcome.error
        print(f"    infrastructure failure ({outcome.error})", file=log, flush=True)
    assert outcome is not None
    if outcome.error is None:
        try:
            outcome.comparisons = load_comparisons(out, seed)
        except (OSError, ValueError) as exc:
            outcome.error = f"unreadable runs: {exc}"
    if outcome.error is None:
        red = any(c.verdict.name == "RED" for c in outcome.comparisons)
        if red != (outcome.exit_code == 1):
            outcome.error = f"exit code {outcome.exit_code} disagrees with the recomputed verdicts"
    outcome.save()
    verdicts = ", ".join(
        f"{c.task} {_pp(c.difference.value) if c.difference else '—'} {c.verdict.name}" for c in outcome.comparisons
    )
    print(f"    {outcome.wall_s:.0f} s, exit {outcome.exit_code}: {verdicts or outcome.error}", file=log, flush=True)
    return outcome


def _pp(fraction: float) -> str:
    return f"{100 * fraction:+.1f} pp"


def rows_of(outcomes: Sequence[EvalOutcome], measured_at: str = "") -> list[dict[str, Any]]:
    rows = []
    for o in outcomes:
        if o.error:
            rows += [
                {
                    "fault": o.fault,
                    "checkpoint": o.checkpoint,
                    "suite": s,
                    "on_accuracy": None,
                    "off_accuracy": None,
                    "delta_pp": None,
                    "p_value": None,
                    "flips": None,
                    "verdict": "ERROR",
                    "n": None,
                    "measured_at": measured_at,
                    **dict.fromkeys(ROW_KEYS[ROW_KEYS.index("logprob_verdict") :]),
                }
                for s in SUITES
            ]
            continue
        for c in o.comparisons:
            ok = c.complete and c.on_accuracy and c.off_accuracy and c.difference
            rows.append(
                {
                    "fault": o.fault,
                    "checkpoint": o.checkpoint,
                    "suite": c.task,
                    "on_accuracy": round(c.on_accuracy.value, 4) if ok else None,
                    "off_accuracy": round(c.off_accuracy.value, 4) if ok else None,
                    "delta_pp": round(100 * c.difference.value, 2) if ok else None,
                    "p_value": (round(c.mcnemar_p, 6) if c.mcnemar_p is not None else None),
                    "flips": len(c.flips),
                    "verdict": c.verdict.name,
                    "n": c.n if c.complete else None,
                    "measured_at": measured_at,
                    **_logprob_columns(c, o.reach.get(c.task)),
                }
            )
    return rows


def _logprob_columns(c: TaskComparison, reach: LogitReach | None) -> dict[str, Any]:
    axis = c.logprobs
    return {
        "logprob_verdict": axis.verdict.name if axis else None,
        "logprob_max_delta": float(f"{axis.delta.max:.3g}") if axis and axis.n else None,
        "logprob_max_kl": float(f"{axis.kl.max:.3g}") if axis and axis.n else None,
        "logprob_parted": axis.parted if axis else None,
        "logits_changed": reach.changed if reach else None,
    }


def attach_reach(outcomes: Sequence[EvalOutcome]) -> None:
    """Each fault eval's graphs-on generations against its checkpoint's clean eval, bit for bit (``LogitReach``)."""
    clean = {o.checkpoint: baseline_items(o.out) for o in outcomes if o.fault == CLEAN and not o.error}
    for o in outcomes:
        if o.fault == CLEAN or o.error or o.checkpoint not in clean:
            continue
        mine = baseline_items(o.out)
        o.reach = {t: r for t in SUITES if (r := logit_reach(mine, clean[o.checkpoint], t)) is not None}


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import torch

    return {
        "nproc": str(os.cpu_count()),
        "cpu": cpu,
        "arch": platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def kill_matrix_index(path: Path) -> tuple[dict[str, FaultRow], str]:
    """Fault id -> its kill-matrix row, and a line saying where that came from."""
    try:
        matrix = kill_record.load(path)
    except (OSError, ValueError):
        return {}, f"no kill matrix at `{path}` (run `swa-harness faults`)"
    shown = os.path.relpath(path, REPO) if Path(path).resolve().is_relative_to(REPO) else str(path)
    where = f"`{shown}` ({matrix.target or 'harness'}, generated {matrix.generated_at or '?'})"
    return {f.spec.id: f for f in matrix.faults}, where


def _cell(c: TaskComparison | None) -> str:
    if c is None or not c.complete or c.difference is None:
        return "ERROR"
    p = f"p={c.mcnemar_p:.2g}" if c.mcnemar_p is not None else "p=—"
    return f"{_pp(c.difference.value)} ({p}, {len(c.flips)} flips, {c.n_divergent} texts differ) **{c.verdict.name}**"


def _comp(o: EvalOutcome, suite: str) -> TaskComparison | None:
    return next((c for c in o.comparisons if c.task == suite), None)


def _kills(record: FaultRow | None) -> str:
    if record is None:
        return "not in the kill matrix"
    parts = [f"{s}: {c.status}" + (f" ({c.kill_class})" if c.kill_class else "") for s, c in record.cells.items()]
    return "; ".join(parts) or "—"


def _kill_text(record: FaultRow | None) -> str:
    if record is None:
        return "It is not in the kill matrix read here."
    killers = [s for s, c in record.cells.items() if c.status == "killed"]
    if not killers:
        return "No suite of the kill matrix kills it either."
    first = record.cells[killers[0]].failure
    classes = sorted({record.cells[k].kill_class or "?" for k in killers})
    names = " and ".join(f"{k}" for k in killers)
    return (
        f"The {names} suite{'s' if len(killers) > 1 else ''} kill{'' if len(killers) > 1 else 's'} it "
        f"({'/'.join(classes)}; first failure `{(first.test or first.message) if first else ''}`), whatever the accuracy."
    )


def paragraph(
    fault: str,
    outcomes: Sequence[EvalOutcome],
    record: FaultRow | None,
    user_sees: str,
    clean_mde: dict[tuple[str, str], float],
    alpha: float = Thresholds().alpha,
) -> str:
    """What accuracy alone says about this fault, per checkpoint, against what the kill matrix says.

    ``clean_mde`` is each (checkpoint, suite)'s MDE in its clean eval: the smallest drop the suite
    could prove at this size, which is what a user running the accuracy job without the fault has.
    """
    per_ckpt, weak = [], []
    red = identical = evals = 0
    for o in outcomes:
        evals += 1
        if o.error:
            refused = engine_refusal(o)
            per_ckpt.append(
                f"`{o.checkpoint}` no verdict (" + (f"the engine refused: {refused}" if refused else o.error) + ")"
            )
            continue
        parts = []
        for c in o.comparisons:
            if c.difference is None:
                parts.append(f"{SUITE_LABEL[c.task]} incomplete")
                continue
            parts.append(f"{SUITE_LABEL[c.task]} {_pp(c.difference.value)} {c.verdict.name}")
            mde = clean_mde.get((o.checkpoint, c.task))
            if c.verdict.name == "RED" and (c.mcnemar_p is None or c.mcnemar_p >= alpha):
                inside = f", inside its {100 * mde:.1f} pp MDE" if mde and abs(c.difference.value) < mde else ""
                p_text = "—" if c.mcnemar_p is None else f"{c.mcnemar_p:.2g}"
                weak.append(
                    f"{SUITE_LABEL[c.task]} on `{o.checkpoint}` ({_pp(c.difference.value)}, p = {p_text}{inside})"
                )
        divergent = sum(c.n_divergent for c in o.comparisons)
        identical += divergent == 0
        red += o.overall == "RED"
        if any(r.changed for r in o.reach.values()) and within_noise(o):
            parts.append(reading(o))
        per_ckpt.append(
            f"`{o.checkpoint}` "
            + ", ".join(parts)
            + (
                " (every generation byte-identical to graphs off)"
                if divergent == 0
                else f" ({divergent} of {sum(c.n for c in o.comparisons)} generations differ)"
            )
        )
    kill = _kill_text(record)
    refused = [r for o in outcomes if o.error and (r := engine_refusal(o))]
    if outcomes and all(o.error for o in outcomes) and len(refused) == len(outcomes):
        judgement = (
            "**The job gives no verdict**: on every checkpoint the graphs-on server's engine refused the requests with "
            f"its own check ({refused[0].split(':', 1)[0]}), so lm-eval failed and the eval exited 2. A user sees the "
            f"engine's error, not a number; an engine without that check would serve the corrupted KV. {kill}"
        )
    elif red == 0 and identical == evals:
        judgement = (
            "**Accuracy alone would miss it.** Not one generated token differs from graphs off on "
            f"{'either checkpoint' if evals > 1 else 'this checkpoint'}"
            + (
                ", and not one logprob differs from the clean eval's graphs-on arm: the fault changes no logit the "
                "job reads, so more items of the same kind would not help (the logprob axis above). "
                if all(o.reach and not any(r.changed for r in o.reach.values()) for o in outcomes)
                else ". "
            )
            + kill
        )
    elif red == 0:
        judgement = f"**Accuracy alone would miss it** at these sizes: no RED on any checkpoint. {kill}"
    elif red < evals:
        judgement = f"**Accuracy alone would miss it on part of the checkpoints** (RED on {red} of {evals}). {kill}"
    elif weak:
        judgement = (
            "Accuracy flags it, but narrowly: "
            + "; ".join(weak)
            + (" is" if len(weak) == 1 else " are")
            + " RED only by the "
            f"{100 * Thresholds().max_drop:.0f} pp max-drop rule, not by significance, so a smaller suite "
            f"or a workload that pads less could pass it. {kill}"
        )
    else:
        judgement = (
            f"Accuracy catches it loudly (significant drops everywhere) but cannot say where it comes from. {kill}"
        )
    return f"**`{fault}`** — {user_sees} Accuracy: {'; '.join(per_ckpt)}. {judgement}"


def _short(text: str | None, limit: int = 200) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _commit_range(outcomes: Sequence[EvalOutcome]) -> str:
    commits = list(dict.fromkeys(_commit(o) for o in outcomes))
    if len(commits) == 1:
        return f"`{commits[0]}` for every eval"
    return (
        f"{len(commits)} states of the checkout ({', '.join(f'`{c}`' for c in commits)}; column `engine commit`): "
        "the shared working tree moved during the run. Each eval's ON and OFF arms ran the same code, so every "
        "Δ is paired within one state"
    )


def _commit(o: EvalOutcome) -> str:
    """The checkout an eval ran: recorded in its outcome.json when it started; for an eval recorded before that field
    existed, the commit HEAD was on when its run was recorded (git log), marked as such (its dirty state unknown)."""
    try:
        state = json.loads((o.out / "outcome.json").read_text()).get("checkout")
        if state:
            return f"{state['commit'][:7]}{'+dirty' if state.get('dirty') else ''}"
        when = json.loads((o.out / "provenance.json").read_text())["run"]["recorded at"]
        sha = subprocess.run(
            ["git", "log", "-1", "--format=%h", f"--before={when}", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        return f"{sha[:7]} (HEAD then)" if sha else "?"
    except (OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError):
        return "?"


def _axis_cell(c: TaskComparison | None) -> str:
    axis = c.logprobs if c else None
    if axis is None:
        return "no logprobs"
    if not axis.n:
        return f"**{axis.verdict.name}** ({axis.reason})"
    return f"**{axis.verdict.name}** (KL {axis.kl.max:.2g}, max\\|Δ\\| {axis.delta.max:.2g}, {axis.parted} parted)"


def _reach_cell(o: EvalOutcome) -> str:
    if o.fault == CLEAN:
        return "— (the reference for this column)"
    if not o.reach:
        return "not compared"
    changed = sum(r.changed for r in o.reach.values())
    compared = sum(r.compared for r in o.reach.values())
    missing = sum(r.missing for r in o.reach.values())
    size = (
        f" (max\\|Δ\\| {max(r.max_delta for r in o.reach.values()):.2g}, KL {max(r.max_kl for r in o.reach.values()):.2g})"
        if changed
        else ""
    )
    return f"{changed} of {compared}{size}" + (f" ({missing} without logprobs)" if missing else "")


@functools.cache
def _amber() -> Any:
    """The logprob axis's AMBER limits for the job's engine and dtype, read once."""
    from harness.evals.logprobs import load_thresholds, threshold_key

    return load_thresholds()[threshold_key("harness", "float32")].amber


def hit_tokens(out: Path) -> int | None:
    """Prompt tokens the graphs-on server's prefix cache served over the whole eval (its own counter)."""
    found = [
        (json.loads(path.read_text()).get("meta", {}).get("engine") or {}).get("prefix_cache_hit_tokens")
        for path in out.glob("*/on/runs/*.json")
    ]
    counts = [c for c in found if isinstance(c, int)]
    return max(counts) if counts else None  # one server for both tasks: its counter only grows


def within_noise(o: EvalOutcome) -> bool:
    """Every changed generation moved by less than the axis's AMBER limits (float noise, no wrong KV read)."""
    amber = _amber()
    return all(r.max_delta <= amber.max_abs_delta and r.max_kl <= amber.max_kl for r in o.reach.values())


def engine_refusal(o: EvalOutcome) -> str | None:
    """The exception the graphs-on server's engine raised (its own invariant check), from the server's log."""
    import re

    for log in sorted(o.out.glob("*/on/server.log")):
        for line in log.read_text(errors="replace").splitlines():
            if m := re.match(r"^(?:[a-z_]+\.)*([A-Z]\w*Error): (.*)$", line):
                return f"{m.group(1)}: {_short(m.group(2), 90)}"
    return None


def reading(o: EvalOutcome) -> str:
    """What the logprob axis and the logit comparison say together about one fault eval."""
    if o.error:
        refused = engine_refusal(o)
        return f"no verdict: the engine's own check stopped the requests ({refused})" if refused else "eval failed"
    red = any(c.logprobs and c.logprobs.verdict.name == "RED" for c in o.comparisons)
    changed = sum(r.changed for r in o.reach.values())
    if not o.reach:
        return "not compared with a clean eval"
    if changed and red:
        return "changes logits; RED on the axis"
    if changed and within_noise(o):
        mine, clean = hit_tokens(o.out), hit_tokens(o.out.parent / CLEAN)
        if mine is not None and clean is not None and mine != clean:
            return (
                f"reached: the cache served {mine:,} prompt tokens where the clean job's served {clean:,}; the "
                "changed generations moved by float noise only (below the axis's AMBER limits, where a wrong KV read "
                "moves logprobs by whole nats), so what the changed hits read held the right values on this workload"
            )
        return "moves logits by float noise only, below the axis's AMBER limits"
    if changed:
        return "**missed: changes logits, not RED on the axis**"
    if red:
        return "**RED although no logit differs from the clean graphs-on arm**"
    return "changes no logit the job reads: not reached by this workload"


def logprob_section(outcomes: Sequence[EvalOutcome], faults: Sequence[str], names: Sequence[str]) -> list[str]:
    """The logprob axis per fault eval, beside a bit-for-bit comparison with the clean eval's graphs-on arm."""
    by = {(o.checkpoint, o.fault): o for o in outcomes}
    evals = [by[(n, f)] for f in faults for n in names if (n, f) in by]
    changed = [o for o in evals if not o.error and any(r.changed for r in o.reach.values())]
    reached = [o for o in changed if not within_noise(o)]
    noise = [o for o in changed if within_noise(o)]
    red = [o for o in reached if any(c.logprobs and c.logprobs.verdict.name == "RED" for c in o.comparisons)]
    out = [
        "",
        "## The logprob axis",
        "",
        "Beside accuracy, each eval's graphs-on and graphs-off arms record the top-5 logprobs of every generated "
        "token and are compared on the common prefix of their generations (KL over the top 5 with the rest as one "
        "bucket, the chosen token's max |Δlogprob|, the items whose generations part; thresholds from 20 clean seeds, "
        "`harness/evals/logprob_thresholds.json`). The last columns compare each fault eval's graphs-on arm with the "
        "clean eval's graphs-on arm of the same checkpoint, bit for bit (the response and every recorded logprob): "
        "the clean job is deterministic on CPU, so an item that differs there is one whose logits the fault changed.",
        "",
        f"Of {len(evals)} fault evals: **{len(red)} of the {len(reached)}** that move the job's logits beyond float "
        f"noise are RED on the logprob axis; {len(noise)} move them by float noise only (below the axis's AMBER "
        f"limits); {sum(not o.error for o in evals) - len(changed)} change no logit at all"
        + (
            f"; {sum(bool(o.error) for o in evals)} ended without a verdict (the reading says why)."
            if any(o.error for o in evals)
            else "."
        ),
        "",
        "| fault | checkpoint | logprobs GSM-style | logprobs AIME-style | generations whose logits differ from the "
        "clean graphs-on arm | reading |",
        "|---|---|---|---|---|---|",
    ]
    for fault in [CLEAN, *faults]:
        for name in names:
            o = by.get((name, fault))
            if o is None:
                continue
            label = f"`{fault}`" if fault != CLEAN else "clean (baseline)"
            if o.error:
                out.append(f"| {label} | `{name}` | ERROR | ERROR | — | {reading(o)} |")
                continue
            out.append(
                f"| {label} | `{name}` | {_axis_cell(_comp(o, 'gsm_style'))} | {_axis_cell(_comp(o, 'aime_style'))} "
                f"| {_reach_cell(o)} | {reading(o) if fault != CLEAN else '—'} |"
            )
    return out


REACH_JSON = REPO / "docs" / "fault-reach.json"


def reach_section(path: Path = REACH_JSON) -> list[str]:
    """``bench.fault_reach``'s configurations for the faults the job does not reach, and its plans through the server;
    for a fault no configuration reaches, why (``NO_ARM_WHY``: read in the engine's code)."""
    if not path.is_file():
        return ["", "## Arms that reach what the job does not", "", "Not measured: run `python -m bench.fault_reach`."]
    data = json.loads(path.read_text())
    names = [c["name"] for c in data["configs"]]
    out = [
        "",
        "## Arms that reach what the job does not",
        "",
        f"Every fault above that the job never harms (bit-identical generations, or float noise only), tried in-process (clean engine against faulty engine, "
        f"`{Path(data['model']).name}`, the job's first {data['items']} GSM-style contexts as lm-eval builds them, "
        "greedy) under the configurations real deployments use. Cell: the generations whose tokens or logits (every "
        "generated position, the whole vocabulary) differ from the clean engine's, bit for bit, and the largest "
        "|Δlogprob| over the vocabulary where their contexts agree; in bold where that is beyond float noise "
        f"(the logprob axis's AMBER limit, {data.get('noise', 0.0):.2g}); *stopped*: the "
        "engine's own invariant check raised (a server answers with an error and the eval has no verdict). "
        f"Command: `{data['command']}`; started {data['started']}, {data['wall_s'] / 60:.1f} min.",
        "",
        "| fault | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for fault, cells in data["cells"].items():
        row = []
        for name in names:
            cell = cells.get(name)
            if cell is None:
                row.append("—")
            elif cell["stopped_by"]:
                row.append(f"stopped: {cell['stopped_by'].split(':', 1)[0]}")
            elif not cell["changed"]:
                row.append(f"0 of {cell['items']}")
            else:
                size = cell.get("max_delta", 0.0)
                text = f"{cell['changed']} of {cell['items']} (max\\|Δ\\| {size:.2g})"
                row.append(f"**{text}**" if size > data.get("noise", 0.0) else text)
        out.append(f"| `{fault}` | " + " | ".join(row) + " |")
    noise = data.get("noise", 0.0)
    for fault, cells in data["cells"].items():
        if any(c["stopped_by"] or c.get("max_delta", 0.0) > noise for c in cells.values()):
            if fault in NO_PLAN_WHY:
                out += ["", f"**`{fault}`, reached by an arm and not by the job**: {NO_PLAN_WHY[fault]}."]
            continue
        why = NO_ARM_WHY.get(fault)
        out += [
            "",
            f"**No configuration makes `{fault}` move a logit beyond float noise**: "
            + (f"{why}." if why else "none of those tried moves a logit beyond float noise; why is not yet read."),
        ]
    for plan in data.get("plans", []):
        out += [
            "",
            f"**`{plan['fault']}` through the server**: `swa-harness eval --plan {plan['plan']}` "
            f"(exit {plan['exit_code']}, {plan['wall_s']:.0f} s), the fault arm against the plan's clean baseline:",
        ]
        if plan.get("error"):
            out.append(f"not judged: {plan['error']}")
            continue
        out += [
            "",
            "| task | N | Δ accuracy | accuracy verdict | logprob verdict | worst KL | generations whose logits "
            "differ from the clean arm |",
            "|---|---|---|---|---|---|---|",
        ]
        for task, t in plan["tasks"].items():
            delta = "—" if t["delta_pp"] is None else f"{t['delta_pp']:+.1f} pp"
            out.append(
                f"| {SUITE_LABEL.get(task, task)} | {t['n']} | {delta} | **{t['verdict']}** | "
                f"**{t['logprob_verdict']}** | {t['logprob_max_kl']} | {t['logits_changed']} of {t['n']} "
                f"(max\\|Δ\\| {t.get('logits_max_delta')}) |"
            )
    return out


def sglang_server_section() -> list[str]:
    """SGLang's faults through its server (``bench.sglang_fault_effects``'s JSON), between its markers."""
    from bench import sglang_fault_effects as sfe

    if not sfe.DOCS_JSON.is_file():
        return []
    body = sfe.render_section(json.loads(sfe.DOCS_JSON.read_text()))
    return ["", sfe.MARK[0], body.rstrip(), sfe.MARK[1]] if body else []


def write_markdown(
    path: Path,
    outcomes: Sequence[EvalOutcome],
    faults: Sequence[str],
    models: Sequence[str],
    limits: dict[str, int],
    command: str,
    wall_s: float,
    info: dict[str, str],
    kill_matrix: Path,
    started: str,
    rendered: str | None = None,
) -> None:
    from harness.faults import FAULTS

    names = [Path(m).name for m in models]
    by = {(o.checkpoint, o.fault): o for o in outcomes}
    index, km_where = kill_matrix_index(kill_matrix)
    out = [
        "# Fault effects on the accuracy suites",
        "",
        "What each behavioural fault of the catalog does to the accuracy suites: `swa-harness eval --fault ID` "
        "injects the fault into the graphs-on server only, the graphs-off server is the reference, the two are "
        "compared paired (McNemar exact, paired bootstrap CI, MDE at 80 % power; verdict rule in "
        "`harness/evals/compare.py`). A clean eval (no fault) per checkpoint is the baseline. "
        "Machine-readable: `docs/fault-effects.json` (rendered in the HTML report).",
        "",
        f"Command: `{command}`  ",
        f"Limits: GSM-style {limits['gsm_style']} items, AIME-style {limits['aime_style']} items (the first N of "
        f"each frozen set), greedy decoding, bootstrap seed from `--seed`.  ",
        f"Machine: {info['nproc']} CPUs ({info['cpu']}, {info['arch']}), torch {info['torch']}, "
        f"Python {info['python']}; load average at start {info['load']} (shared machine).  ",
        f"Started {started}; **total wall time {wall_s / 60:.1f} min** for {len(outcomes)} evals, one at a time "
        f"(each eval runs its graphs-on and graphs-off servers side by side).  ",
        *[
            f"Retried with `--sequential`: `{o.checkpoint}` / `{o.fault}`, after the side-by-side attempt failed "
            f"({_short(o.retried_after)}).  "
            for o in outcomes
            if o.sequential and o.retried_after
        ],
        f"Engine under test: {_commit_range(outcomes)}.  ",
        f"Kill matrix read for the last column: {km_where}.  ",
        "Not run: "
        + ", ".join(f"`{f}`" for f in behavioural_faults() if job_layer(f))
        + " (they patch the job's own layers, the response cache's key, the tokenizer memo and the history series, "
        "which an eval's server never runs; the reuse suite kills them).  ",
        *([f"Docs re-rendered from the saved evals (nothing re-run) by `{rendered}`.  "] if rendered else []),
        "",
        "Cells: ON − OFF accuracy (McNemar p, items scored differently) and the suite's verdict; the eval's "
        "overall verdict is the worst of the two.",
        "",
    ]
    header = [
        "fault",
        "checkpoint",
        "Δ GSM-style",
        "Δ AIME-style",
        "eval verdict",
        "wall s",
        "engine commit",
        "kill matrix (scenarios; differential)",
    ]
    out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for fault in [CLEAN, *faults]:
        for name in names:
            o = by.get((name, fault))
            if o is None:
                continue
            kills = "—" if fault == CLEAN else _kills(index.get(fault))
            cells = [
                f"`{fault}`" if fault != CLEAN else "clean (baseline)",
                f"`{name}`",
                _cell(_comp(o, "gsm_style")) if not o.error else "ERROR",
                _cell(_comp(o, "aime_style")) if not o.error else "ERROR",
                f"**{o.overall}**",
                f"{o.wall_s:.0f}{' (sequential)' if o.sequential else ''}",
                _commit(o),
                kills,
            ]
            out.append("| " + " | ".join(cells) + " |")
    out += [
        "",
        "A clean eval is AMBER wherever a suite's MDE exceeds the 5 pp `max_mde` (AIME-style at these sizes): "
        "underpowered, not a difference.",
        "",
        "Accuracy of the graphs-off reference (no fault is ever injected there, so it should not move between "
        "the evals of a checkpoint) and the smallest drop each suite could prove at these sizes:",
        "",
        "| checkpoint | suite | N | OFF accuracy (clean eval) | OFF accuracy across all evals | MDE (clean eval) |",
        "|---|---|---|---|---|---|",
    ]
    for name in names:
        o = by.get((name, CLEAN))
        for suite in SUITES:
            c = _comp(o, suite) if o else None
            if c and c.off_accuracy:
                mde = "—" if c.mde is None else f"{100 * c.mde:.1f} pp"
                offs = [
                    x.off_accuracy.value
                    for e in outcomes
                    if e.checkpoint == name
                    for x in e.comparisons
                    if x.task == suite and x.off_accuracy
                ]
                spread = (
                    f"identical in all {len(offs)}"
                    if len(set(offs)) == 1
                    else f"{100 * min(offs):.1f} – {100 * max(offs):.1f} % over {len(offs)}"
                )
                out.append(
                    f"| `{name}` | {SUITE_LABEL[suite]} | {c.n} | {100 * c.off_accuracy.value:.1f} % | {spread} "
                    f"| {mde} |"
                )
    clean_mde = {
        (o.checkpoint, c.task): c.mde for o in outcomes if o.fault == CLEAN for c in o.comparisons if c.mde is not None
    }
    out += logprob_section(outcomes, faults, names)
    out += reach_section()
    out += sglang_server_section()
    out += [
        "",
        "## What accuracy alone would miss",
        "",
        "Per fault: what the user sees in a real deployment (from the catalog), what the accuracy job says here, "
        "and what the scenario and differential suites say (kill matrix above).",
        "",
    ]
    for fault in faults:
        fo = [by[(n, fault)] for n in names if (n, fault) in by]
        user_sees = FAULTS[fault].user_sees.rstrip(".") + "." if fault in FAULTS else ""
        out += [paragraph(fault, fo, index.get(fault), user_sees, clean_mde), ""]
    path.write_text("\n".join(out).rstrip() + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--models", default=",".join(MODELS), help="comma-separated checkpoints (default: both shipped)"
    )
    parser.add_argument("--faults", default=None, help="comma-separated fault ids (default: every behavioural fault)")
    parser.add_argument("--limit-gsm-style", type=int, default=FROZEN_TASKS["gsm_style"].default_limit)
    parser.add_argument("--limit-aime-style", type=int, default=FROZEN_TASKS["aime_style"].default_limit)
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed passed to every eval (default 0)")
    parser.add_argument(
        "--sequential",
        action="store_true",
        help="run every eval's OFF after its ON (default: side by side, --sequential only on failure)",
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/swa-fault-effects"), help="where the evals write")
    parser.add_argument("--kill-matrix", type=Path, default=DEFAULT_KILL_MATRIX)
    parser.add_argument("--json", type=Path, default=DOCS_JSON)
    parser.add_argument("--md", type=Path, default=DOCS_MD)
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="run nothing: re-write the docs from the finished run recorded in --work/manifest.json",
    )
    args = parser.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if args.render_only:
        return render(args)

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    known = [f for f in behavioural_faults() if not job_layer(f)]
    faults = known if args.faults is None else [f.strip() for f in args.faults.split(",") if f.strip()]
    from harness.faults import FAULTS

    if in_job := [f for f in faults if f in FAULTS and job_layer(f)]:
        parser.error(f"{', '.join(in_job)}: patch the job's own layers, not the server: an eval cannot reach them")
    unknown = [f for f in faults if f not in known]
    if unknown:
        parser.error(f"not behavioural server faults of the catalog: {unknown}; known: {', '.join(known)}")
    limits = {"gsm_style": args.limit_gsm_style, "aime_style": args.limit_aime_style}
    info = machine()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    command = " ".join(["python -m bench.fault_effects", shlex.join(args.argv)]).strip()
    print(
        f"{len(models)} checkpoint(s) x ({len(faults)} faults + clean) = {len(models) * (len(faults) + 1)} evals; "
        f"limits {limits}; work {args.work}",
        flush=True,
    )

    start = time.perf_counter()
    outcomes = [
        run_one(m, f, args.work, limits, args.seed, args.sequential, sys.stdout)
        for m in models
        for f in [CLEAN, *faults]
    ]
    wall = time.perf_counter() - start

    manifest = {
        "command": command,
        "started": started,
        "wall_s": round(wall, 1),
        "machine": info,
        "limits": limits,
        "models": models,
        "faults": faults,
        "seed": args.seed,
        "evals": [str(o.out.relative_to(args.work)) for o in outcomes],
    }
    (args.work / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    write_docs(args, outcomes, manifest)
    print(f"total wall {wall / 60:.1f} min; wrote {args.json} and {args.md}", flush=True)
    return 1 if any(o.error for o in outcomes) else 0


def write_docs(args: argparse.Namespace, outcomes: Sequence[EvalOutcome], manifest: dict[str, Any]) -> None:
    attach_reach(outcomes)
    rows = rows_of(outcomes, str(manifest["started"])[:10])
    assert all(tuple(r) == ROW_KEYS for r in rows), "fault-effects rows must keep the documented keys"
    args.json.write_text(json.dumps(rows, indent=1) + "\n")
    write_markdown(
        args.md,
        outcomes,
        manifest["faults"],
        manifest["models"],
        manifest["limits"],
        manifest["command"],
        manifest["wall_s"],
        manifest["machine"],
        args.kill_matrix,
        manifest["started"],
        rendered=manifest.get("rendered"),
    )


def render(args: argparse.Namespace) -> int:
    """The docs from a finished run's manifest and eval folders; nothing is run."""
    manifest = json.loads((args.work / "manifest.json").read_text())
    outcomes = [EvalOutcome.load(args.work / rel, manifest["seed"]) for rel in manifest["evals"]]
    rendered = " ".join(["python -m bench.fault_effects", shlex.join(args.argv)])
    write_docs(args, outcomes, {**manifest, "rendered": rendered})
    print(f"re-rendered {args.json} and {args.md} from {args.work / 'manifest.json'}", flush=True)
    return 1 if any(o.error for o in outcomes) else 0


if __name__ == "__main__":
    raise SystemExit(main())
