"""A plan as text (what ``--dry-run`` prints): arms, tasks, models, every command with its env, comparisons."""

from __future__ import annotations

from typing import Mapping, Sequence

from harness.jobs.plan import Plan


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(header), "  " + "-+-".join("-" * w for w in widths), *(line(r) for r in rows)]


def _engines(plan: Plan) -> str:
    names = {"harness": "harness", "sglang": "SGLang", "vllm": "vLLM", "external": "external"}
    return "/".join(dict.fromkeys(names.get(a.engine, a.engine) for a in plan.arms))


def render(plan: Plan) -> str:
    """The plan as text: arms, tasks, models, every command with its env, comparisons."""
    n_evals = sum(len(r.evals) for r in plan.runs)
    n_servers = sum(r.launched for r in plan.runs)
    at_once = "one at a time" if plan.parallel == 1 else f"{plan.parallel} at a time"
    limit = plan.limit
    items = (
        "whole test sets"
        if limit is None
        else f"first {limit} per task"
        if not isinstance(limit, Mapping)
        else ", ".join(f"{k}={v}" for k, v in limit.items())
    )
    requests = (
        f"{plan.concurrency} concurrent requests per server"
        if plan.client.batch_size == 1
        else f"{plan.client.batch_size} prompts per request, {plan.concurrency} concurrent per server"
    )
    lines = [
        f"{plan.title}: {len(plan.models)} model(s) x {len(plan.arms)} arm(s) x {len(plan.tasks)} task(s): "
        f"{n_servers} {_engines(plan)} server(s) launched {at_once}, {n_evals} lm-eval run(s), "
        f"{len(plan.comparisons)} comparison(s)",
        f"items: {items}; {requests}; greedy decoding; out: {plan.out}",
        "",
        "arms:",
    ]
    baseline = next(a.name for a in plan.arms if a.role == "baseline")
    lines += _table(
        ("arm", "flags", "env", "compared", "expected", "purpose"),
        [
            (
                a.name,
                " ".join(a.server_flags) or "(defaults)",
                " ".join(f"{k}={v}" for k, v in sorted(a.env.items())) or "-",
                "baseline"
                if a.role == "baseline"
                else (f"{baseline} vs {a.name}" if a.role == "reference" else f"{a.name} vs {baseline}"),
                "-" if a.role == "baseline" else ("RED" if a.expect_red else "not RED"),
                a.purpose,
            )
            for a in plan.arms
        ],
    )
    lines += ["", "tasks:"]
    lines += _table(
        ("task", "lm-eval task", "items", "filter (completions / chat)", "max drop", "source"),
        [
            (
                t.name,
                t.lm_eval_task,
                str(t.items),
                f"{t.filter} / {t.chat_filter}",
                "default" if t.max_drop is None else f"{100 * t.max_drop:g} pp",
                t.source,
            )
            for t in plan.tasks
        ],
    )
    lines += ["", "models:"]
    lines += _table(
        ("model", "API", "server flags", "max_gen_toks", "note"),
        [
            (
                m.name,
                "chat (local-chat-completions, chat template)" if m.chat else "completions (local-completions)",
                " ".join(m.server_args) or "-",
                " ".join(f"{k}={v}" for k, v in m.max_gen_toks.items()) or "task defaults",
                m.note,
            )
            for m in plan.models
        ],
    )
    for i, run in enumerate(plan.runs, 1):
        lines += ["", f"[{i}/{len(plan.runs)}] {run.label}  ({run.dir})"]
        url = run.url or "http://127.0.0.1:<port it reports>"
        if run.server is None:
            lines.append(f"  server: external, {run.url}")
        else:
            lines += [
                f"  server: {run.server.shell()}",
                f"  ready:  GET {url}/health (200), log {run.dir / 'server.log'}",
            ]
        for step in run.evals:
            count = sum(step.items.values())
            lines.append(
                f"  {step.name} ({count} items, filter {'/'.join(dict.fromkeys(step.filters.values()))}): "
                f"{step.command(url).shell()}"
            )
        if run.server is not None:
            grace = run.arm.kind.stop_grace_s
            lines.append(f"  stop:   SIGTERM to the server's process group (SIGKILL after {grace:g} s)")
    lines += [
        "",
        "comparisons (paired by item; McNemar exact, paired bootstrap, MDE; verdict per task, worst overall):",
    ]
    lines += _table(
        ("model", "comparison", "ON (treatment)", "OFF (reference)", "expected", "report"),
        [
            (c.model.name, c.name, c.treatment, c.reference, c.expectation, str(c.dir / "index.html"))
            for c in plan.comparisons
        ],
    )
    if plan.overview:
        lines += ["", f"overview: {plan.out / 'index.html'} (one column per arm), {plan.out / 'summary.json'}"]
    lines.append(
        "exit code: 0 when every comparison meets its expectation, 1 otherwise, 2 when an arm could not run "
        "(no verdict)"
    )
    return "\n".join(lines) + "\n"
