"""Render the accuracy comparison as ONE self-contained ``index.html``.

Self-contained means: CSS inline, charts as inline SVG drawn in Python, no script, font, image or
link that would reach the network, so the file can be mailed, attached to CI or opened offline.
All model text goes through Jinja2 autoescaping (responses can contain anything, ``<script>``
included). Numbers are formatted here, not in the template, so the template stays declarative.

Layout rules the template relies on (checked in Chromium at 1400 and 800 px): nothing is wider
than the page, so long values are either shortened with the full text in a ``title`` (hashes,
test ids) or folded into a ``<details>`` (errors, command lines); the verdict comes first.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup, escape

from harness.evals import stats
from harness.evals.compare import Tokenize
from harness.evals.history import TaskSnapshot, Trend, TrendPoint, engine_label
from harness.evals.results import ItemDiff, RunRecord, RunResult, Summary, TaskComparison, Verdict
from harness.paths import REPO, shown
from harness.report.inputs import FaultEffects, KillMatrixFile, ReleaseMatrix
from harness.report.palette import INK, LINE, MUTED, SOFT, VERDICT_COLOURS
from harness.report.svg import forest_plot, trend_chart

TEMPLATES = Path(__file__).resolve().parent / "templates"
TEMPLATE_NAME = "report.html.j2"
FOLD_CHARS = 140  # longer values are folded into <details>, with their first line as the summary
_HEX = re.compile(r"^[0-9a-f]{32,}$")
# Provenance groups in the order a reader asks: what was tested, on what model, how, where.
_GROUP_ORDER = ("engine under test", "model", "arms", "run", "hardware", "software", "datasets")


def _environment() -> Environment:
    # autoescape=True for every template (the name ends in .j2, which select_autoescape would miss).
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["breakable"] = breakable
    env.filters["verdict_text"] = lambda value: str(value).replace("-", " ")  # NO-VERDICT (a CSS class) reads NO VERDICT
    return env


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _pp(x: float) -> str:
    text = f"{100 * x:+.1f} pp"
    return text.replace("+0.0", "0.0").replace("-0.0", "0.0")


def _ci(low: float, high: float, fmt: Callable[[float], str] = _pct) -> str:
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


def _value(text: str) -> dict[str, Any]:
    """A key/value cell: hex digests shortened (full on hover), long text folded."""
    cell = fold(text)
    cell["title"] = text if _HEX.match(text) else ""
    if cell["title"]:
        cell.update(short=text[:12] + "…", folded=False)
    return cell


_EPOCH_KEYS = re.compile(r"(_at|_time|time|timestamp)$")


def _decoded(value: Any) -> Any:
    """A string holding JSON (servers report some settings double-encoded) as the value it encodes."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def portable(text: str) -> str:
    """Machine paths out of a text the report shows: the checkout's prefix dropped, the home folder as ``~``."""
    return text.replace(f"{REPO}/", "").replace(str(REPO), ".").replace(str(Path.home()), "~")


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


def _kv_rows(data: Mapping[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    return [{"key": key, **_value(text)} for key, text in _flatten(data, prefix)]


def provenance_groups(provenance: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Provenance as titled key/value tables: one per nested group, loose top-level keys under "run"."""
    loose = {k: v for k, v in provenance.items() if not (isinstance(v, Mapping) and v)}
    nested = {k: v for k, v in provenance.items() if isinstance(v, Mapping) and v}
    if loose:
        nested["run"] = {**dict(nested.get("run", {})), **loose}
    order = [g for g in _GROUP_ORDER if g in nested] + sorted(g for g in nested if g not in _GROUP_ORDER)
    return [{"title": g, "id": "prov-" + re.sub(r"\W+", "-", g), "rows": _kv_rows(nested[g])} for g in order]


def _group(provenance: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = provenance.get(name)
    return value if isinstance(value, Mapping) else {}


def _joined(data: Mapping[str, Any], keys: Sequence[str], sep: str = " · ") -> str:
    return sep.join(f"{k} {data[k]}" if k not in ("cpu", "device", "name") else str(data[k]) for k in keys if data.get(k))


def provenance_glance(provenance: Mapping[str, Any], graphs: Mapping[str, str] | None = None,
                      paths: Mapping[str, Mapping[str, int]] | None = None) -> list[dict[str, str]]:
    """One line per provenance group for the top of the report: what ran, on what, where, with what data.

    ``graphs`` maps an arm to the graph mode its server actually ran (``auto`` resolves at start-up);
    ``paths`` to its forwards per path (``decode-graph``, ``extend-eager``, ...), so the reader sees which
    paths actually ran graphs.
    Missing groups are left out (older provenance records are flat); the full record is shown folded below.
    """
    graphs = graphs or {}
    rows = [{"label": "engine under test", "text": engine_label(provenance),
             "title": str(_group(provenance, "engine under test").get("commit", ""))}]
    model = _group(provenance, "model")
    if model:
        digest = str(model.get("model.safetensors sha256", ""))
        short = f" · weights sha256 {digest[:12]}…" if _HEX.match(digest) else ""
        rows.append({"label": "model", "text": f"{model.get('name', '?')}{short}", "title": digest})
    arms = _group(provenance, "arms")
    if arms:
        def arm_text(label: str, arm: Mapping[str, Any]) -> str:
            asked, ran = str(arm.get("graphs", "?")), graphs.get(label)
            mode = f"{ran} (asked {asked})" if ran and ran != asked else asked
            fault = f", fault {arm['fault']}" if arm.get("fault") not in (None, "none") else ""
            counts = (paths or {}).get(label) or {}
            ran = ", ".join(f"{p.removesuffix('-graph')} {n}" for p, n in sorted(counts.items()) if p.endswith("-graph") and n)
            graphed = f" (graph forwards: {ran})" if ran else (" (no graph forwards)" if counts else "")
            name = str(arm.get("arm") or label)  # a plan's arm (a stress arm compared as ON) by its own name
            named = f" {name}," if name != label else ""
            return f"{label.upper()}:{named} graphs {mode}{graphed}{fault}"

        text = " · ".join(arm_text(label, arm) for label, arm in arms.items() if isinstance(arm, Mapping))
        rows.append({"label": "arms", "text": text, "title": ""})
    for name, keys in (("hardware", ("device", "gpu", "cpu", "logical cores", "memory")),
                       ("software", ("torch", "lm-eval", "python"))):
        if _group(provenance, name):
            rows.append({"label": name, "text": _joined(_group(provenance, name), keys), "title": ""})
    datasets = _group(provenance, "datasets")
    if datasets:
        parts, files = [], []
        for task, hashes in datasets.items():
            listing = sorted(f"{f} {h}" for f, h in (hashes.items() if isinstance(hashes, Mapping) else []))
            parts.append(f"{task} {hashlib.sha256(chr(10).join(listing).encode()).hexdigest()[:12]}")
            files += [f"{task}/{line}" for line in listing]
        rows.append({"label": "datasets", "text": " · ".join(parts), "title": "\n".join(files)})
    run = _group(provenance, "run")
    if run:
        rows.append({"label": "run", "text": _joined(run, ("id", "recorded at")), "title": str(run.get("command", ""))})
    return rows


def breakable(text: Any) -> Markup:
    """Escaped text with line-break opportunities after ``. _ / : - , =`` (ids and keys wrap at their joints)."""
    return Markup(re.sub(r"([._/:,=-])", r"\1<wbr>", str(escape(str(text)))))


def _task_row(comp: TaskComparison) -> dict[str, Any]:
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
            on_acc=_pct(comp.on_accuracy.value),
            on_ci=_ci(comp.on_accuracy.low, comp.on_accuracy.high),
            off_acc=_pct(comp.off_accuracy.value),
            off_ci=_ci(comp.off_accuracy.low, comp.off_accuracy.high),
            diff=_pp(comp.difference.value),
            diff_ci=_ci(comp.difference.low, comp.difference.high, _pp),
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


def _diff_view(diff: ItemDiff, tokenize: Tokenize | None) -> dict[str, Any]:
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


def _record_view(record: RunRecord) -> dict[str, Any]:
    """A run's record as saved, as key/value rows; nested mappings (e.g. engine counters) fold into their own table."""
    meta = record.to_dict()
    flat = {k: v for k, v in meta.items() if not isinstance(v, Mapping)}
    return {
        "rows": _kv_rows(flat),
        "groups": [{"title": k, "rows": _kv_rows(v)} for k, v in meta.items() if isinstance(v, Mapping) and v],
    }


def _run_row(run: RunResult, confidence: float) -> dict[str, Any]:
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
        row["accuracy"] = _pct(acc.value)
        row["accuracy_ci"] = _ci(acc.low, acc.high)
    return row


def _kill_cell(cell: Mapping[str, Any] | None) -> dict[str, Any]:
    status = str(cell.get("status")) if cell else "missing"
    failure = str((cell or {}).get("first_failure") or "")
    test, _, message = failure.partition(": ")
    return {
        "status": status,
        "kill_class": (cell or {}).get("kill_class"),
        "first_failure": failure,
        "test": test if message else "",  # "Class::test_name" (wraps) and the message (shortened)
        "message": fold(message or failure, 110)["short"],
    }


def _kill_matrix_view(source: KillMatrixFile) -> dict[str, Any]:
    """Fault x suite grid from one target's JSON; unknown statuses are shown, not dropped."""
    base = {"target": source.target, "source": _where(source.source), "error": source.error}
    if source.matrix is None:
        return {**base, "rows": [], "summary": f"unreadable: {source.error}", "clean_ok": False, "all_killed": False}
    matrix = source.matrix
    clean = matrix.get("clean") or {}
    faults = matrix.get("faults") or []
    suites: list[str] = list(matrix.get("suites") or clean)
    for fault in faults:
        suites.extend(s for s in fault.get("suites", {}) if s not in suites)
    rows = []
    killed = survived = errored = 0
    has_class = False
    for fault in faults:
        cells = [_kill_cell(fault.get("suites", {}).get(suite)) for suite in suites]
        statuses = [c["status"] for c in cells]
        has_class = has_class or any(c["kill_class"] for c in cells)
        if "killed" in statuses:
            killed += 1
            outcome = "killed"
        elif "error" in statuses or "missing" in statuses:
            errored += 1
            outcome = "error"
        else:
            survived += 1
            outcome = "survived"
        rows.append({"id": str(fault.get("id", "?")), "seed": str(fault.get("seed", "")),
                     "breaks": str(fault.get("breaks", "")), "user_sees": str(fault.get("user_sees", "")),
                     "cells": cells, "outcome": outcome})
    clean_cells = [{"status": str((clean.get(s) or {}).get("status", "missing")),
                    "detail": str((clean.get(s) or {}).get("detail") or "")} for s in suites]
    clean_failed = [s for s, c in zip(suites, clean_cells) if c["status"] != "passed"]
    summary = f"{killed} of {len(faults)} faults killed by at least one suite"
    if survived:
        summary += f", {survived} survived every suite"
    if errored:
        summary += f", {errored} not killed, with a suite erroring"
    summary += "; clean baseline " + (
        "passed every suite" if not clean_failed else "FAILED on " + ", ".join(clean_failed)
    )
    return {
        **base,
        "generated_at": str(matrix.get("generated_at", "")),
        "wall_s": matrix.get("wall_s"),
        "suites": suites,
        "clean": clean_cells,
        "rows": rows,
        "summary": summary,
        "clean_ok": not clean_failed,
        "all_killed": killed == len(faults),
        "has_kill_class": has_class,
    }


def _where(path: str) -> str:
    """A file the report names: relative to the checkout (or ~), else its name only; no machine paths on a page."""
    text = shown(Path(path)) if path.startswith("/") else path
    return text if not text.startswith("/") else f"{Path(path).name} (outside the checkout)"


def _fault_effects_view(effects: FaultEffects | None) -> dict[str, Any] | None:
    """The catalog's measured effects, labelled as another run's numbers: when, on what, at which N."""
    if effects is None:
        return None
    dates = sorted({str(r["measured_at"]) for r in effects.rows if r.get("measured_at")})
    sizes = {str(r.get("suite")): r["n"] for r in effects.rows if isinstance(r.get("n"), int)}
    checkpoints = list(dict.fromkeys(str(r.get("checkpoint")) for r in effects.rows if r.get("checkpoint")))
    label = (f"Measured by python -m bench.fault_effects, not by this run"
             f"{' on ' + ' to '.join(dict.fromkeys([dates[0], dates[-1]])) if dates else ''}, "
             f"the harness engine on {', '.join(checkpoints) or 'its checkpoints'}"
             f"{' at N = ' + ', '.join(f'{s} {n}' for s, n in sizes.items()) if sizes else ''}: "
             "its 'clean' rows are that run's baseline, not this one's.")
    rows = []
    for r in effects.rows:
        delta = r.get("delta_pp")
        rows.append({"fault": str(r.get("fault", "?")), "checkpoint": str(r.get("checkpoint", "")),
                     "task": str(r.get("suite", "")),
                     "delta": f"{delta:+.1f} pp" if isinstance(delta, (int, float)) else str(delta or "—"),
                     "verdict": str(r.get("verdict", ""))})
    return {"source": _where(effects.source), "label": label, "error": effects.error, "rows": rows}


def _release_matrix_view(found: ReleaseMatrix | None) -> dict[str, Any] | None:
    """Release x suite, each cell its status and counts; the reasons behind a cell on hover."""
    if found is None:
        return None
    base = {"source": _where(found.source), "error": found.error, "suites": [], "rows": [], "label": ""}
    if found.matrix is None:
        return base
    matrix = found.matrix
    suites = list(matrix.get("suites") or {})
    for row in matrix["rows"]:  # rows merged from a run of other suites (--update) keep theirs
        suites += [s for s in row.get("cells") or {} if s not in suites]
    rows = []
    for row in matrix["rows"]:
        cells = []
        for suite in suites:
            cell = (row.get("cells") or {}).get(suite)
            if row.get("error"):
                cells.append({"status": "error", "text": "error", "title": str(row["error"])})
                continue
            if not cell:
                cells.append({"status": "not run", "text": "not run", "title": "this suite did not run on this row"})
                continue
            status = str(cell.get("status"))
            reasons = [f"{n} skipped: {r}" for r, n in (cell.get("skipped") or {}).items()]
            text = {"passed": f"passed {cell.get('passed', 0)}", "failed": f"failed {len(cell.get('failed') or [])}",
                    "not applicable": "n/a"}.get(status, status)
            cells.append({"status": status, "text": text, "title": "\n".join([*(cell.get("failed") or []), *reasons])})
        rows.append({"release": str(row.get("release")), "cells": cells,
                     "seconds": f"{row.get('install_s', 0)} + {row.get('run_s', 0)}"})
    label = (f"Measured by `{matrix.get('command', 'swa-harness sglang-matrix')}` on {matrix.get('date', '?')}, not by "
             "this run. A cell is n/a when the release lacks what the suite drives or runs it only as a Triton kernel; "
             "a skip never counts as a pass. Hover a cell for its reasons.")
    return {**base, "suites": suites, "rows": rows, "label": label}


def _snapshot_cells(s: TaskSnapshot | None) -> dict[str, Any]:
    if s is None:
        return {"ran": False}
    cells: dict[str, Any] = {"ran": True, "verdict": s.verdict, "complete": s.complete,
                             "flips": f"{s.on_broke} / {s.on_fixed}", "errors": [fold(e, 80) for e in s.errors]}
    if s.complete and s.on and s.off and s.delta:
        # Compact CIs ("[64.8, 72.9] %"): the trend table sits in a half-width card.
        cells.update(on=_pct(s.on.value), on_ci=f"[{100 * s.on.low:.1f}, {100 * s.on.high:.1f}] %",
                     off=_pct(s.off.value), off_ci=f"[{100 * s.off.low:.1f}, {100 * s.off.high:.1f}] %",
                     delta=_pp(s.delta.value), delta_ci=f"[{100 * s.delta.low:+.1f}, {100 * s.delta.high:+.1f}] pp")
    return cells


def _point_view(p: TrendPoint) -> dict[str, Any]:
    return {"index": p.index, "when": p.entry.recorded_at.replace("T", " ")[:16], "engine": p.entry.engine,
            "run_id": p.entry.run_id, "changed_from": p.changed_from, "current": p.current,
            "verdict": p.snapshot.verdict if p.snapshot else p.entry.verdict, **_snapshot_cells(p.snapshot)}


def _trend_view(trend: Trend | None) -> dict[str, Any] | None:
    """Per task a chart and a table (newest first), plus the overall "since when" line."""
    if trend is None:
        return None
    view: dict[str, Any] = {name: getattr(trend, name) for name in ("series", "runs", "other_series", "unreadable")}
    view["since"] = _point_view(trend.since) if trend.since else None
    view["tasks"] = [
        {
            "task": st.task,
            "anchor": f"trend-{st.task}",
            "chart": Markup(trend_chart(st.task, st.points)),  # built from escaped parts in svg.py
            "points": [_point_view(p) for p in reversed(st.points)],
            "since": _point_view(st.since) if st.since else None,
        }
        for st in trend.tasks
    ]
    return view


def build_context(
    comparisons: Sequence[TaskComparison],
    runs: Sequence[RunResult],
    *,
    summary: Summary,
    provenance: Mapping[str, Any],
    kill_matrices: Sequence[KillMatrixFile] = (),
    fault_effects: FaultEffects | None = None,
    release_matrix: ReleaseMatrix | None = None,
    trend: Trend | None = None,
    tokenize: Tokenize | None = None,
    generated_at: str | None = None,
) -> dict[str, Any]:
    """Everything the template shows, already formatted (exposed for tests and other renderers).

    ``summary`` is the job's own overall verdict, shown as is: the report never judges again.
    ``tokenize`` must be the splitter the comparison used, so "first divergent token" names the
    token at the index the comparison found (characters when it is None).
    """
    thresholds = comparisons[0].thresholds if comparisons else {}
    alpha = float(thresholds.get("alpha", 0.05))
    max_drop = thresholds.get("max_drop")
    matrices = [_kill_matrix_view(m) for m in kill_matrices]
    return {
        "title": "swa-harness accuracy: graphs ON vs OFF",
        "generated_at": generated_at or datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "summary": {
            "verdict": summary.verdict.value,
            "reason": fold(summary.reason, 220),
            # The tasks that set the verdict, one folded line each, so a long error cannot bury the others.
            "culprits": [{"task": c.task, "anchor": f"suite-{c.task}", "reason": fold(c.reason, 200)}
                         for c in comparisons
                         if summary.verdict.name != "GREEN" and c.verdict in (summary.verdict, Verdict.NONE)],
            "counts": summary.counts,
            "colour": VERDICT_COLOURS[summary.verdict],
        },
        "confidence": f"{100 * (1 - alpha):g} %",
        # The footnote's numbers come from this run, never from an example run of another size.
        "mde_note": "; ".join(f"{c.task} {100 * c.mde:.1f} pp at N = {c.n}" for c in comparisons
                              if c.complete and c.mde is not None),
        "tasks": [_task_row(comp) for comp in comparisons],
        "forest": Markup(forest_plot(comparisons, max_drop)),  # built from escaped parts in svg.py
        "flip_sections": [
            {
                "task": comp.task,
                "anchor": f"flips-{comp.task}",
                "back": f"suite-{comp.task}",
                "complete": comp.complete,
                # ON-broke flips first: those are the ones a regression hunt starts from.
                "flips": [_diff_view(d, tokenize) for d in sorted(comp.flips, key=lambda d: d.on_correct)],
                "text_diffs": [_diff_view(d, tokenize) for d in comp.text_diffs],
            }
            for comp in comparisons
        ],
        "runs": [_run_row(run, 1 - alpha) for run in runs],
        "kill_matrices": matrices,
        "fault_effects": _fault_effects_view(fault_effects),
        "release_matrix": _release_matrix_view(release_matrix),
        "trend": _trend_view(trend),
        "thresholds": [(k, "None" if v is None else str(v)) for k, v in thresholds.items()],
        "provenance": provenance_groups(provenance),
        "glance": provenance_glance(provenance, {r.record.side: r.graphs for r in runs if r.record.side},
                                    {r.record.side: r.record.forward_paths for r in runs if r.record.side})
        if provenance else [],
        "engine": engine_label(provenance),
        "colours": {**{v.value: c for v, c in VERDICT_COLOURS.items()}, "line": LINE, "muted": MUTED, "soft": SOFT,
                    "ink": INK},
    }


def render_html(
    comparisons: Sequence[TaskComparison],
    runs: Sequence[RunResult],
    *,
    summary: Summary,
    provenance: Mapping[str, Any],
    **extra: Any,
) -> str:
    """The report as an HTML string; ``extra`` are :func:`build_context`'s optional inputs."""
    context = build_context(comparisons, runs, summary=summary, provenance=provenance, **extra)
    return _environment().get_template(TEMPLATE_NAME).render(**context)


def render_report(
    comparisons: Sequence[TaskComparison],
    runs: Sequence[RunResult],
    *,
    summary: Summary,
    provenance: Mapping[str, Any],
    out_dir: str | Path,
    **extra: Any,
) -> Path:
    """Write ``out_dir/index.html`` and return its path; the verdict shown is ``summary``, as the job computed it."""
    html = render_html(comparisons, runs, summary=summary, provenance=provenance, **extra)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    path.write_text(html, encoding="utf-8")
    return path


__all__ = ["render_report", "render_html", "build_context", "breakable", "fold", "provenance_glance", "provenance_groups"]
