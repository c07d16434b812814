"""What each part of the report shows, as the template's plain values: numbers formatted, long text folded,
machine paths dropped. Views read parsed records (``harness.evals`` results and history, ``inputs``) and
never the JSON; the template stays declarative.

Layout rules the template relies on (checked in Chromium at 1400 and 800 px): nothing is wider than the
page, so long values are either shortened with the full text in a ``title`` (hashes, test ids) or folded
into a ``<details>`` (errors, command lines).
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from markupsafe import Markup

from harness.evals import stats
from harness.evals.compare import Tokenize
from harness.evals.formats import pct, pp
from harness.evals.history import TaskSnapshot, Trend, TrendPoint
from harness.evals.results import ItemDiff, RunRecord, RunResult, Summary, TaskComparison, Verdict
from harness.kill_record import MALFORMED, FaultRow
from harness.mutants.record import MutantResult, MutationRun
from harness.mutants.survivors import SURVIVORS, score
from harness.paths import REPO, shown
from harness.report.inputs import (
    ArmProvenance,
    FaultEffects,
    KillMatrixFile,
    MutationRunFile,
    Provenance,
    ReleaseMatrix,
    ReleaseRow,
)
from harness.report.palette import VERDICT_COLOURS
from harness.report.svg import trend_chart

FOLD_CHARS = 140  # longer values are folded into <details>, with their first line as the summary
_HEX = re.compile(r"^[0-9a-f]{32,}$")
_EPOCH_KEYS = re.compile(r"(_at|_time|time|timestamp)$")
# Provenance groups in the order a reader asks: what was tested, on what model, how, where.
_GROUP_ORDER = ("engine under test", "model", "arms", "run", "hardware", "software", "datasets")


# -- text ------------------------------------------------------------------------------------------------


def _ci(low: float, high: float, fmt: Callable[[float], str] = pct) -> str:
    return f"[{fmt(low)}, {fmt(high)}]"


def _p_value(p: float) -> str:
    return f"{p:.3g}" if p >= 1e-4 else f"{p:.1e}"


def fold(text: str, limit: int = FOLD_CHARS) -> dict[str, Any]:
    """``short`` always fits a line; ``folded`` says the template must offer ``full`` in a <details>."""
    text = str(text)
    first = text.splitlines()[0] if text else ""
    folded = len(text) > limit or "\n" in text.strip()
    short = first if len(first) <= limit else first[: limit - 1].rstrip() + "…"
    return {"short": short, "full": text, "folded": folded}


def portable(text: str) -> str:
    """Machine paths out of a text the report shows: the checkout's prefix dropped, the home folder as ``~``."""
    return text.replace(f"{REPO}/", "").replace(str(REPO), ".").replace(str(Path.home()), "~")


def _where(path: str) -> str:
    """A file the report names: relative to the checkout (or ~), else its name only; no machine paths on a page."""
    text = shown(Path(path)) if path.startswith("/") else path
    return text if not text.startswith("/") else f"{Path(path).name} (outside the checkout)"


# -- key/value tables ------------------------------------------------------------------------------------


def _value(text: str) -> dict[str, Any]:
    """A key/value cell: hex digests shortened (full on hover), long text folded."""
    cell = fold(text)
    cell["title"] = text if _HEX.match(text) else ""
    if cell["title"]:
        cell.update(short=text[:12] + "…", folded=False)
    return cell


def _decoded(value: Any) -> Any:
    """A string holding JSON (servers report some settings double-encoded) as the value it encodes."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _shown(key: str, value: Any) -> str:
    """A value as a reader wants it: no Python or JSON spellings, epochs as UTC dates, floats rounded."""
    if value is None or value == {} or value == []:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)) and _EPOCH_KEYS.search(key) and 1e9 < value < 1e11:
        return datetime.fromtimestamp(value, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        if all(not isinstance(v, (Mapping, list, tuple)) for v in value):
            return ", ".join(_shown(key, v) for v in value)
        return portable(json.dumps(value, sort_keys=True, default=str))
    return portable(str(value))


def _flatten(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """``(dotted.key, text)`` rows; nested mappings (JSON in a string too) become dotted keys, values readable."""
    rows: list[tuple[str, str]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        value = _decoded(value)
        if isinstance(value, Mapping) and value:
            rows.extend(_flatten(value, f"{name}."))
        else:
            rows.append((name, _shown(str(key), value)))
    return rows


def kv_rows(data: Mapping[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    return [{"key": key, **_value(text)} for key, text in _flatten(data, prefix)]


# -- provenance ------------------------------------------------------------------------------------------


def provenance_groups(provenance: Provenance) -> list[dict[str, Any]]:
    """The whole record as titled key/value tables: one per nested group, loose top-level keys under "run"."""
    record = provenance.record
    loose = {k: v for k, v in record.items() if not (isinstance(v, Mapping) and v)}
    nested = {k: v for k, v in record.items() if isinstance(v, Mapping) and v}
    if loose:
        nested["run"] = {**dict(nested.get("run", {})), **loose}
    order = [g for g in _GROUP_ORDER if g in nested] + sorted(g for g in nested if g not in _GROUP_ORDER)
    return [{"title": g, "id": "prov-" + re.sub(r"\W+", "-", g), "rows": kv_rows(nested[g])} for g in order]


def _joined(data: Mapping[str, Any], keys: Sequence[str], sep: str = " · ") -> str:
    return sep.join(
        f"{k} {data[k]}" if k not in ("cpu", "device", "name") else str(data[k]) for k in keys if data.get(k)
    )


def _arm_text(arm: ArmProvenance, served: str | None, forwards: Mapping[str, int]) -> str:
    """``ON: graphs tape (asked auto) (graph forwards: decode 2022, extend 62)``; a plan's arm compared as ON or
    OFF under another name is named (a stress arm)."""
    mode = f"{served} (asked {arm.graphs})" if served and served != arm.graphs else arm.graphs
    graph_forwards = ", ".join(
        f"{p.removesuffix('-graph')} {n}" for p, n in sorted(forwards.items()) if p.endswith("-graph") and n
    )
    graphed = f" (graph forwards: {graph_forwards})" if graph_forwards else (" (no graph forwards)" if forwards else "")
    named = f" {arm.arm}," if arm.arm != arm.side else ""
    fault = f", fault {arm.fault}" if arm.fault is not None else ""
    return f"{arm.side.upper()}:{named} graphs {mode}{graphed}{fault}"


def _datasets_row(datasets: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Each task's files as one short digest; every file and its own digest on hover."""
    parts = [
        f"{task} {hashlib.sha256(chr(10).join(listing).encode()).hexdigest()[:12]}"
        for task, listing in datasets.items()
    ]
    files = [f"{task}/{line}" for task, listing in datasets.items() for line in listing]
    return {"label": "datasets", "text": " · ".join(parts), "title": "\n".join(files)}


def provenance_glance(
    provenance: Provenance,
    graphs: Mapping[str, str] | None = None,
    paths: Mapping[str, Mapping[str, int]] | None = None,
) -> list[dict[str, str]]:
    """One line per provenance group for the top of the report: what ran, on what, where, with what data.

    ``graphs`` maps a side (on/off) to the graph mode its server actually ran (``auto`` resolves at start-up);
    ``paths`` to its forwards per path (``decode-graph``, ``extend-eager``, ...), so the reader sees which
    paths actually ran graphs. Missing groups are left out (older provenance records are flat); the full
    record is shown folded below.
    """
    graphs, paths = graphs or {}, paths or {}
    rows = [{"label": "engine under test", "text": provenance.engine, "title": provenance.commit}]
    if provenance.model is not None:
        digest = provenance.weights
        short = f" · weights sha256 {digest[:12]}…" if _HEX.match(digest) else ""
        rows.append({"label": "model", "text": f"{provenance.model}{short}", "title": digest})
    if provenance.arms:
        text = " · ".join(_arm_text(arm, graphs.get(arm.side), paths.get(arm.side) or {}) for arm in provenance.arms)
        rows.append({"label": "arms", "text": text, "title": ""})
    for name, group, keys in (
        ("hardware", provenance.hardware, ("device", "gpu", "cpu", "logical cores", "memory")),
        ("software", provenance.software, ("torch", "lm-eval", "python")),
    ):
        if group:
            rows.append({"label": name, "text": _joined(group, keys), "title": ""})
    if provenance.datasets:
        rows.append(_datasets_row(provenance.datasets))
    if provenance.run:
        rows.append(
            {
                "label": "run",
                "text": _joined(provenance.run, ("id", "recorded at")),
                "title": str(provenance.run.get("command", "")),
            }
        )
    return rows


# -- the verdict, tasks, flips and runs ------------------------------------------------------------------


def summary_view(summary: Summary, comparisons: Sequence[TaskComparison]) -> dict[str, Any]:
    """The verdict at the top, its reason, and the tasks that set it."""
    return {
        "verdict": summary.verdict.value,
        "reason": fold(summary.reason, 220),
        # The tasks that set the verdict, one folded line each, so a long error cannot bury the others.
        "culprits": [
            {"task": c.task, "anchor": f"suite-{c.task}", "reason": fold(c.reason, 200)}
            for c in comparisons
            if summary.verdict.name != "GREEN" and c.verdict in (summary.verdict, Verdict.NONE)
        ],
        "counts": summary.counts,
        "colour": VERDICT_COLOURS[summary.verdict],
    }


def logprob_row(comp: TaskComparison) -> dict[str, Any] | None:
    """The logprob axis's cells for one task (None: the runs recorded no logprobs)."""
    axis = comp.logprobs
    if axis is None:
        return None
    g = lambda v: f"{v:.2g}"  # noqa: E731
    return {
        "task": comp.task,
        "verdict": axis.verdict.value,
        "reason": fold(axis.reason),
        "n": axis.n,
        "missing": axis.missing,
        "positions": axis.positions,
        "parted": axis.parted,
        "delta": [g(v) for v in (axis.delta.p50, axis.delta.p90, axis.delta.p99, axis.delta.max)],
        "kl": [g(v) for v in (axis.kl.p50, axis.kl.p90, axis.kl.p99, axis.kl.max)],
        "key": axis.key,
    }


def task_row(comp: TaskComparison) -> dict[str, Any]:
    """Table cells for one task; an incomplete comparison carries (folded) errors and no numbers."""
    row: dict[str, Any] = {
        "task": comp.task,
        "model": comp.model,
        "graphs": f"{comp.on_graphs} vs {comp.off_graphs}",
        "complete": comp.complete,
        "errors": [fold(e) for e in comp.errors],
        "verdict": comp.verdict.value,
        "reasons": [fold(r) for r in comp.reasons],
        "anchor": f"suite-{comp.task}",
    }
    if comp.complete:
        assert comp.on_accuracy and comp.off_accuracy and comp.difference and comp.mde is not None
        assert comp.mcnemar_p is not None
        row.update(
            n=comp.n,
            on_acc=pct(comp.on_accuracy.value),
            on_ci=_ci(comp.on_accuracy.low, comp.on_accuracy.high),
            off_acc=pct(comp.off_accuracy.value),
            off_ci=_ci(comp.off_accuracy.low, comp.off_accuracy.high),
            diff=pp(comp.difference.value),
            diff_ci=_ci(comp.difference.low, comp.difference.high, pp),
            discordant=f"{comp.on_better} / {comp.off_better}",
            p=_p_value(comp.mcnemar_p),
            mde=f"{100 * comp.mde:.1f} pp",
            divergent=comp.n_divergent,
        )
    return row


def _token_at(text: str, index: int | None, tokenize: Tokenize | None) -> str:
    """The token at ``index`` (characters without a tokenizer), JSON-quoted so whitespace shows."""
    if index is None:
        return "—"
    parts = list(tokenize(text)) if tokenize is not None else list(text)
    return json.dumps(str(parts[index]), ensure_ascii=False) if index < len(parts) else "(end)"


def diff_view(diff: ItemDiff, tokenize: Tokenize | None) -> dict[str, Any]:
    """Split both responses at the common prefix so the template can mark the diverging rest."""
    cut = diff.prefix_chars
    return {
        "item_id": diff.item_id,
        "direction": diff.direction,
        "prompt": diff.prompt,
        "gold": diff.gold,
        "on_extracted": "—" if diff.on_extracted is None else diff.on_extracted,
        "off_extracted": "—" if diff.off_extracted is None else diff.off_extracted,
        "on_correct": diff.on_correct,
        "off_correct": diff.off_correct,
        "first_diff_token": diff.first_diff_token,
        "unit": "token" if tokenize is not None else "character",
        "on_token": _token_at(diff.on_response, diff.first_diff_token, tokenize),
        "off_token": _token_at(diff.off_response, diff.first_diff_token, tokenize),
        "prefix_chars": cut,
        "identical": diff.on_response == diff.off_response,
        "on_prefix": diff.on_response[:cut],
        "on_rest": diff.on_response[cut:],
        "off_prefix": diff.off_response[:cut],
        "off_rest": diff.off_response[cut:],
    }


def flip_section(comp: TaskComparison, tokenize: Tokenize | None) -> dict[str, Any]:
    return {
        "task": comp.task,
        "anchor": f"flips-{comp.task}",
        "back": f"suite-{comp.task}",
        "complete": comp.complete,
        # ON-broke flips first: those are the ones a regression hunt starts from.
        "flips": [diff_view(d, tokenize) for d in sorted(comp.flips, key=lambda d: d.on_correct)],
        "text_diffs": [diff_view(d, tokenize) for d in comp.text_diffs],
    }


def _record_view(record: RunRecord) -> dict[str, Any]:
    """A run's record as saved, as key/value rows; nested mappings (e.g. engine counters) fold into their own table."""
    saved = record.to_dict()
    flat = {k: v for k, v in saved.items() if not isinstance(v, Mapping)}
    return {
        "rows": kv_rows(flat),
        "groups": [{"title": k, "rows": kv_rows(v)} for k, v in saved.items() if isinstance(v, Mapping) and v],
    }


def run_row(run: RunResult, confidence: float) -> dict[str, Any]:
    row: dict[str, Any] = {
        "task": run.task,
        "graphs": run.graphs,
        "model": run.model,
        "complete": run.complete,
        "error": fold(run.error) if run.error else None,
        "n_items": len(run.items),
        "wall_s": f"{run.wall_s:.1f}",
        "meta": _record_view(run.record),
        "accuracy": None,
    }
    if run.complete and run.items:
        acc = stats.accuracy([item.correct for item in run.items], confidence)
        row["accuracy"] = pct(acc.value)
        row["accuracy_ci"] = _ci(acc.low, acc.high)
    return row


# -- kill matrices, fault effects, release matrix --------------------------------------------------------


def _fault_row_view(fault: FaultRow, suites: Sequence[str]) -> dict[str, Any]:
    """One fault's cells; its outcome is killed when any suite killed it, unreached when no suite has a test that
    runs its code (a test-impact matrix), error when one could not run or has no cell, else survived. A test-impact
    matrix's suites after the first behavioural kill are "not run"."""
    cells = []
    for suite in suites:
        cell = fault.cell(suite)
        failure = cell.failure
        cells.append(
            {
                "status": cell.status,
                "kill_class": cell.kill_class,
                "first_failure": cell.first_failure,
                "test": failure.label() if failure else "",  # "file.py::test [file.py:9]" (wraps)
                "message": fold(failure.message if failure else "", 110)["short"],  # shortened
            }
        )
    statuses = [c["status"] for c in cells]
    outcome = (
        "killed"
        if "killed" in statuses
        else "unreached"
        if statuses and set(statuses) == {"unreached"}
        else "error"
        if {"error", "missing"} & set(statuses)
        else "survived"
    )
    return {
        "id": fault.spec.id,
        "seed": fault.spec.seed,
        "breaks": fault.spec.breaks,
        "user_sees": fault.spec.user_sees,
        "cells": cells,
        "outcome": outcome,
    }


def _kill_summary(outcomes: Sequence[str], clean_failed: Sequence[str]) -> str:
    summary = f"{outcomes.count('killed')} of {len(outcomes)} faults killed by at least one suite"
    if survived := outcomes.count("survived"):
        summary += f", {survived} survived every suite"
    if errored := outcomes.count("error"):
        summary += f", {errored} not killed, with a suite erroring"
    if unreached := outcomes.count("unreached"):
        summary += f", {unreached} unreached (no test runs the code they change)"
    return (
        summary
        + "; clean baseline "
        + ("passed every suite" if not clean_failed else "FAILED on " + ", ".join(clean_failed))
    )


def kill_matrix_view(source: KillMatrixFile) -> dict[str, Any]:
    """Fault x suite grid of one target; unknown statuses are shown, not dropped."""
    base = {"target": source.target, "source": _where(source.source), "error": source.error}
    matrix = source.matrix
    if matrix is None:
        return {**base, "rows": [], "summary": f"unreadable: {source.error}", "clean_ok": False, "all_killed": False}
    suites = matrix.all_suites()
    rows = [_fault_row_view(fault, suites) for fault in matrix.faults]
    clean = [{"status": matrix.clean_cell(s).status, "detail": matrix.clean_cell(s).detail} for s in suites]
    clean_failed = [s for s, c in zip(suites, clean) if c["status"] != "passed"]
    outcomes = [row["outcome"] for row in rows]
    return {
        **base,
        "generated_at": matrix.generated_at,
        "wall_s": matrix.wall_s,
        "suites": list(suites),
        "clean": clean,
        "rows": rows,
        "summary": _kill_summary(outcomes, clean_failed),
        "clean_ok": not clean_failed,
        "all_killed": outcomes.count("killed") == len(outcomes),
        "has_kill_class": any(c["kill_class"] for row in rows for c in row["cells"]),
    }


# -- mutation runs ---------------------------------------------------------------------------------------

MUTANT_STATUSES = ("killed", "error", "timeout", "survived", "unreached")


def _status_counts(statuses: Sequence[str]) -> list[tuple[str, int]]:
    """Each known status's count in the record's order (zeros kept), then any other status a producer wrote."""
    known = [(s, statuses.count(s)) for s in MUTANT_STATUSES]
    return known + [(s, statuses.count(s)) for s in sorted(set(statuses) - set(MUTANT_STATUSES))]


def _mutant_cells(result: MutantResult) -> dict[str, Any]:
    m = result.mutant
    return {
        "id": m.id,
        "status": result.status,
        "module": m.module,
        "line": m.line,
        "function": m.function.removeprefix(m.module + "."),  # the qualname: the module is beside it
        "operator": m.operator,
        "before": m.before.strip(),
        "after": m.after.strip(),
        "tests": f"{result.tests_run} of {result.tests_reaching} reaching tests run"
        if result.tests_reaching
        else "no test reaches it",
        "seconds": f"{result.seconds:.1f} s",
    }


def mutation_run_view(source: MutationRunFile) -> dict[str, Any]:
    """One target's mutation run: the score, counts per status and per module, every mutant not killed with its
    classification (``harness.mutants.survivors``), the killed ones with their killer; labelled as another job's
    numbers."""
    base = {"target": source.target, "source": _where(source.source), "error": source.error}
    if source.run is None:
        return {**base, "summary": f"unreadable: {source.error}"}
    try:
        return {**base, **_mutation_run_parts(source.run)}
    except MALFORMED as exc:  # a field of another type than the record's (the loader does not check types)
        error = f"malformed: {type(exc).__name__}: {exc}"
        return {**base, "error": error, "summary": f"unreadable: {error}"}


def _mutation_run_parts(run: MutationRun) -> dict[str, Any]:
    statuses = [r.status for r in run.results]
    counts = _status_counts(statuses)
    scored = score(run)
    described = scored.describe()
    drawn = (
        f"all {run.population} mutants of the scope"
        if not run.sample
        else f"a sample of {run.sample} of {run.population} mutants (seed {run.seed})"
    )
    held = "" if run.shard == "1/1" else f"; shard {run.shard}: {len(run.results)} of them"
    label = (
        f"Measured by swa-harness mutants --target {run.target}, not by this run, on "
        f"{run.generated_at.replace('T', ' ')}: {run.target} {run.engine_version}, mutants by {run.mutator}, "
        f"{drawn}{held}; {run.wall_s:.0f} s of wall with {run.jobs} jobs (the clean recording {run.recording_s:.0f} s)."
    )
    modules = []
    for module in dict.fromkeys(r.mutant.module for r in run.results):
        of = [r.status for r in run.results if r.mutant.module == module]
        modules.append({"module": module, "mutants": len(of), "counts": [n for _, n in _status_counts(of)]})
    order = {s: i for i, s in enumerate(MUTANT_STATUSES)}
    not_killed = []
    for r in sorted(
        (r for r in run.results if r.status != "killed"),
        key=lambda r: (order.get(r.status, len(order)), r.mutant.module, r.mutant.line, r.mutant.id),
    ):
        row = SURVIVORS.get(r.mutant.id)
        not_killed.append(
            {
                **_mutant_cells(r),
                "kind": row.kind if row else None,
                "detected": r.status in ("error", "timeout"),  # a crash or a hang: the score asks no class of it
                "reason": row.reason if row else "",
                "failure": fold(portable(r.failure.describe()), 200) if r.failure else None,
            }
        )
    killed = [
        {
            **_mutant_cells(r),
            "kill_class": r.kill_class or "",
            "killer": r.failure.label() if r.failure else "",
            "message": fold(portable(r.failure.message), 200) if r.failure else None,
        }
        for r in run.results
        if r.status == "killed"
    ]
    return {
        "engine": f"{run.target} {run.engine_version}",
        "generated_at": run.generated_at,
        "label": label,
        "score": described,
        "counts": counts,
        "statuses": [s for s, _ in counts],
        "summary": f"score {described}; {len(run.results)} mutants: "
        + ", ".join(f"{n} {s}" for s, n in counts)
        + f" ({run.target} {run.engine_version}, {run.generated_at[:10]})",
        "modules": modules,
        "not_killed": not_killed,
        "killed": killed,
        "unclassified": scored.unclassified,
    }


def fault_effects_view(effects: FaultEffects | None) -> dict[str, Any] | None:
    """The catalog's measured effects, labelled as another run's numbers: when, on what, at which N."""
    if effects is None:
        return None
    dates = sorted({e.measured_at for e in effects.rows if e.measured_at})
    sizes = {e.task: e.n for e in effects.rows if e.n is not None}
    checkpoints = list(dict.fromkeys(e.checkpoint for e in effects.rows if e.checkpoint))
    label = (
        f"Measured by python -m bench.fault_effects, not by this run"
        f"{' on ' + ' to '.join(dict.fromkeys([dates[0], dates[-1]])) if dates else ''}, "
        f"the harness engine on {', '.join(checkpoints) or 'its checkpoints'}"
        f"{' at N = ' + ', '.join(f'{s} {n}' for s, n in sizes.items()) if sizes else ''}: "
        "its 'clean' rows are that run's baseline, not this one's."
    )
    rows = [
        {
            "fault": e.fault,
            "checkpoint": e.checkpoint,
            "task": e.task,
            "verdict": e.verdict,
            "delta": f"{e.delta_pp:+.1f} pp" if isinstance(e.delta_pp, (int, float)) else str(e.delta_pp or "—"),
        }
        for e in effects.rows
    ]
    return {"source": _where(effects.source), "label": label, "error": effects.error, "rows": rows}


def _release_cell_view(row: ReleaseRow, suite: str) -> dict[str, str]:
    if row.error:
        return {"status": "error", "text": "error", "title": row.error}
    cell = row.cells.get(suite)
    if cell is None:
        return {"status": "not run", "text": "not run", "title": "this suite did not run on this row"}
    reasons = [f"{n} skipped: {r}" for r, n in cell.skipped.items()]
    text = {"passed": f"passed {cell.passed}", "failed": f"failed {len(cell.failed)}", "not applicable": "n/a"}.get(
        cell.status, cell.status
    )
    return {"status": cell.status, "text": text, "title": "\n".join([*cell.failed, *reasons])}


def release_matrix_view(found: ReleaseMatrix | None) -> dict[str, Any] | None:
    """Release x suite, each cell its status and counts; the reasons behind a cell on hover."""
    if found is None:
        return None
    base = {"source": _where(found.source), "error": found.error, "suites": [], "rows": [], "label": ""}
    if found.error is not None:
        return base
    rows = [
        {
            "release": row.release,
            "cells": [_release_cell_view(row, s) for s in found.suites],
            "seconds": f"{row.install_s} + {row.run_s}",
        }
        for row in found.rows
    ]
    label = (
        f"Measured by `{found.command}` on {found.date}, not by "
        "this run. A cell is n/a when the release lacks what the suite drives or runs it only as a Triton kernel; "
        "a skip never counts as a pass. Hover a cell for its reasons."
    )
    return {**base, "suites": list(found.suites), "rows": rows, "label": label}


# -- the trend -------------------------------------------------------------------------------------------


def _snapshot_cells(s: TaskSnapshot | None) -> dict[str, Any]:
    """A trend row's cells: ``ran`` False when the task was not run that time."""
    if s is None:
        return {"ran": False}
    cells: dict[str, Any] = {
        "ran": True,
        "verdict": s.verdict,
        "complete": s.complete,
        "flips": f"{s.on_broke} / {s.on_fixed}",
        "errors": [fold(e, 80) for e in s.errors],
    }
    if s.complete and s.on and s.off and s.delta:
        # Compact CIs ("[64.8, 72.9] %"): the trend table sits in a half-width card.
        cells.update(
            on=pct(s.on.value),
            on_ci=f"[{100 * s.on.low:.1f}, {100 * s.on.high:.1f}] %",
            off=pct(s.off.value),
            off_ci=f"[{100 * s.off.low:.1f}, {100 * s.off.high:.1f}] %",
            delta=pp(s.delta.value),
            delta_ci=f"[{100 * s.delta.low:+.1f}, {100 * s.delta.high:+.1f}] pp",
        )
    return cells


def _point_view(p: TrendPoint) -> dict[str, Any]:
    return {
        "index": p.index,
        "when": p.entry.recorded_at.replace("T", " ")[:16],
        "engine": p.entry.engine,
        "run_id": p.entry.run_id,
        "changed_from": p.changed_from,
        "current": p.current,
        "verdict": p.snapshot.verdict if p.snapshot else p.entry.verdict,
        **_snapshot_cells(p.snapshot),
    }


def trend_view(trend: Trend | None) -> dict[str, Any] | None:
    """Per task a chart and a table (newest first), plus the overall "since when" line."""
    if trend is None:
        return None
    view: dict[str, Any] = {name: getattr(trend, name) for name in ("series", "runs", "other_series", "unreadable")}
    view["since"] = _point_view(trend.since) if trend.since else None
    view["tasks"] = [
        {
            "task": t.task,
            "anchor": f"trend-{t.task}",
            "chart": Markup(trend_chart(t.task, t.points)),  # built from escaped parts in svg.py
            "points": [_point_view(p) for p in reversed(t.points)],
            "since": _point_view(t.since) if t.since else None,
        }
        for t in trend.tasks
    ]
    return view
