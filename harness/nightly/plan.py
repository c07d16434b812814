"""The nightly GPU job as data: models x arms x tasks, every server and lm-eval command, the comparisons.

Everything the job will do is decided here, before anything runs, so ``--dry-run`` can print it and
the tests can check it without a GPU. The plan is deterministic: the same options give the same
plan (fixed ports, relative paths, ``python`` rather than this interpreter's path; the runner
substitutes its own interpreter for ``python`` when it launches a command).

Arms (one SGLang server each, one model at a time, on one GPU):

* ``on``: SGLang's defaults, CUDA graphs on; the baseline of every comparison;
* ``off``: CUDA graphs off for decode and prefill; compared as "graphs on (treatment) vs off (reference)";
* stress arms, graphs on with something that makes an SWA hazard likelier, each compared against ``on``;
* ``fault-demo``: graphs on with a seed fix reverted (an SGLang-side catalog fault patched into the
  server's processes by :mod:`harness.nightly.patched_server`); its comparison against ``on`` must
  come out RED, or the job has lost the power to see the regression it exists for.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.evals.suites import SUITES

DEFAULT_OUT = Path("reports/nightly")
DEFAULT_PORT = 30000
DEFAULT_CONCURRENCY = 32  # concurrent requests per server: graph batches of many sizes, so padded rows happen
TASKS_INCLUDE = Path("suites/accuracy")  # the frozen GSM/AIME-style task YAMLs, relative to the checkout
SGLANG_LAUNCH = ("python", "-m", "sglang.launch_server")
PATCHED_LAUNCH = ("python", "-m", "harness.nightly.patched_server")
FAULT_ENV = "SWA_HARNESS_SGLANG_FAULT"  # harness.targets.sglang.faults.FAULT_ENV (not imported: that pulls in torch)
# The seed regression the fault-demo arm reverts by default: #24743, padded decode-graph rows keep the previous
# replay's write locations. It lives in the CUDA decode graph runner's buffer registry, so graphs on exercise it.
DEFAULT_FAULT = "sglang-registry-out-cache-loc-not-zeroed"
LM_EVAL_ENV = {"TOKENIZERS_PARALLELISM": "false"}  # datasets and weights come from the hub on the runner


@dataclass(frozen=True)
class ModelSpec:
    """A model the nightly serves; ``chat`` models are asked through ``/v1/chat/completions`` with their
    chat template (lm-eval's ``local-chat-completions --apply_chat_template``)."""

    name: str  # hub id, also the served model name
    chat: bool
    server_args: tuple[str, ...] = ()  # SGLang flags every arm of this model gets
    max_gen_toks: Mapping[str, int] = field(default_factory=dict)  # task -> generation budget (else the task's own)
    note: str = ""

    @property
    def slug(self) -> str:
        return self.name.replace("/", "--")


@dataclass(frozen=True)
class Arm:
    """One server configuration. ``role``: ``baseline`` (``on``), ``reference`` (compared as on vs it) or
    ``treatment`` (compared as it vs on). ``expect`` names the ServerArgs fields its flags must set."""

    name: str
    purpose: str
    flags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    fault: str | None = None
    role: str = "treatment"
    expect_red: bool = False
    expect: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskSpec:
    """One lm-eval task: built in (hub dataset) or frozen in ``suites/accuracy`` (``frozen``)."""

    name: str  # the suite name in runs and reports
    lm_eval_task: str
    items: int  # size of the whole test set
    filter: str  # the filter whose exact match decides correctness, for completions models
    chat_filter: str  # the same for chat models (they do not reliably keep the few-shot "#### N" format)
    frozen: bool
    source: str
    max_drop: float | None = None  # the comparison's tolerated unproven drop for this task (None: the default)

    def primary_filter(self, model: ModelSpec) -> str:
        return self.chat_filter if model.chat else self.filter


MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec("openai/gpt-oss-20b", chat=True, server_args=("--reasoning-parser", "gpt-oss"),
              max_gen_toks={"gsm8k": 8192, "gsm_style": 8192, "aime_style": 8192},
              note="sliding window 128 alternating with full attention; a reasoning model: the reasoning parser keeps "
                   "the analysis channel out of the answer, and the budget covers it"),
    ModelSpec("google/gemma-4-E2B-it", chat=True,
              max_gen_toks={"gsm8k": 2048, "aime25": 4096, "gsm_style": 2048, "aime_style": 2048},
              note="hybrid sliding-window / global attention, instruction-tuned"),
)}
DEFAULT_MODELS = ("openai/gpt-oss-20b", "google/gemma-4-E2B-it")

GRAPHS_OFF_FLAGS = ("--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled")


def _arms(fault: str) -> dict[str, Arm]:
    arms = (
        Arm("on", "graphs on: SGLang's defaults (CUDA graphs for decode)", role="baseline"),
        Arm("off", "graphs off for decode and prefill (0.5.23's spelling of the deprecated --disable-cuda-graph)",
            flags=GRAPHS_OFF_FLAGS, role="reference",
            expect={"cuda_graph_backend_decode": "disabled", "cuda_graph_backend_prefill": "disabled"}),
        Arm("no-graph-padding", "stress: no padding to a captured batch size (other batch shapes replay or fall "
            "back to eager)", flags=("--disable-cuda-graph-padding",), expect={"disable_cuda_graph_padding": True}),
        Arm("swa-ratio-0.1", "stress: SWA pool a tenth of the full pool, so SWA slots are evicted and reused often",
            flags=("--swa-full-tokens-ratio", "0.1"), expect={"swa_full_tokens_ratio": 0.1}),
        Arm("invariant-check", "stress: SGLang's invariant checks at STRICT (crash on a violated index or value "
            "invariant)", env={"SGLANG_INVARIANT_CHECK": "2"}),
        Arm("fault-demo", f"seed fix reverted: catalog fault {fault} patched into every server process; must be RED",
            fault=fault, env={FAULT_ENV: fault}, expect_red=True),
    )
    return {a.name: a for a in arms}


ARM_NAMES = tuple(_arms(DEFAULT_FAULT))

TASKS: dict[str, TaskSpec] = {t.name: t for t in (
    TaskSpec("gsm8k", "gsm8k", 1319, "strict-match", "flexible-extract", False,
             "lm-eval built-in, hub dataset openai/gsm8k (test, 5-shot)"),
    # 30 items: one item is 3.3 pp, so the default 2 pp tolerance would make a single flip from GPU numerics RED;
    # up to 3 net items are tolerated unless McNemar finds the drop significant (RED then, as everywhere).
    TaskSpec("aime25", "aime25", 30, "none", "none", False, "lm-eval built-in, hub dataset math-ai/aime25 (0-shot)",
             max_drop=0.1),
    *(TaskSpec(s.name, s.task, s.default_limit, s.primary_filter, "flexible-extract", True,
               f"frozen {s.name} set, suites/accuracy/{s.name}.yaml over fixtures/data")
      for s in SUITES.values()),
)}
DEFAULT_TASKS = ("gsm8k", "aime25", "gsm_style", "aime_style")


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    env: Mapping[str, str]  # set on top of the runner's environment

    def shell(self) -> str:
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (prefix + " " if prefix else "") + shlex.join(self.argv)

    def to_dict(self) -> dict[str, Any]:
        return {"argv": list(self.argv), "env": dict(sorted(self.env.items()))}


@dataclass(frozen=True)
class EvalStep:
    task: TaskSpec
    items: int  # items this run scores (the limit or the whole set)
    primary_filter: str
    command: Command
    out: Path  # lm-eval's --output_path


@dataclass(frozen=True)
class ArmRun:
    """One server (model, arm) and the lm-eval runs against it."""

    model: ModelSpec
    arm: Arm
    port: int
    server: Command | None  # None when the arm's server is an external one (``url``)
    url: str
    evals: tuple[EvalStep, ...]
    dir: Path

    @property
    def label(self) -> str:
        return f"{self.model.name} · {self.arm.name}"

    @property
    def sglang_args(self) -> tuple[str, ...]:
        """The flags SGLang's own parser sees (what ``ServerArgs`` must accept)."""
        return sglang_args(self.model, self.arm, self.port)


@dataclass(frozen=True)
class Comparison:
    model: ModelSpec
    treatment: str  # arm compared as "ON" (the one that may be broken)
    reference: str  # arm compared as "OFF"
    expect_red: bool
    dir: Path

    @property
    def name(self) -> str:
        return f"{self.treatment}-vs-{self.reference}"

    @property
    def expectation(self) -> str:
        return "RED (the fault must be seen)" if self.expect_red else "not RED"


@dataclass(frozen=True)
class NightlyPlan:
    models: tuple[ModelSpec, ...]
    arms: tuple[Arm, ...]
    tasks: tuple[TaskSpec, ...]
    limit: int | None
    concurrency: int
    out: Path
    runs: tuple[ArmRun, ...]
    comparisons: tuple[Comparison, ...]

    def run_for(self, model: ModelSpec, arm: str) -> ArmRun:
        return next(r for r in self.runs if r.model == model and r.arm.name == arm)

    def to_dict(self) -> dict[str, Any]:
        return {
            "models": [{"name": m.name, "chat": m.chat, "server_args": list(m.server_args),
                        "max_gen_toks": dict(m.max_gen_toks), "note": m.note} for m in self.models],
            "arms": [{"name": a.name, "purpose": a.purpose, "flags": list(a.flags), "env": dict(a.env), "fault": a.fault,
                      "role": a.role, "expect_red": a.expect_red} for a in self.arms],
            "tasks": [{"name": t.name, "lm_eval_task": t.lm_eval_task, "items": t.items, "filter": t.filter,
                       "chat_filter": t.chat_filter, "frozen": t.frozen, "source": t.source, "max_drop": t.max_drop}
                      for t in self.tasks],
            "limit": self.limit,
            "concurrency": self.concurrency,
            "out": str(self.out),
            "runs": [{"model": r.model.name, "arm": r.arm.name, "url": r.url,
                      "server": r.server.to_dict() if r.server else None,
                      "evals": [{"task": e.task.name, "items": e.items, "filter": e.primary_filter,
                                 "out": str(e.out), **e.command.to_dict()} for e in r.evals]} for r in self.runs],
            "comparisons": [{"model": c.model.name, "name": c.name, "treatment": c.treatment, "reference": c.reference,
                             "expect": c.expectation, "report": str(c.dir / "index.html")} for c in self.comparisons],
            "report": str(self.out / "index.html"),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n"


def sglang_args(model: ModelSpec, arm: Arm, port: int) -> tuple[str, ...]:
    return ("--model-path", model.name, "--served-model-name", model.name, "--host", "127.0.0.1", "--port", str(port),
            "--random-seed", "0", *model.server_args, *arm.flags)


def server_command(model: ModelSpec, arm: Arm, port: int) -> Command:
    args = sglang_args(model, arm, port)
    if arm.fault:
        return Command((*PATCHED_LAUNCH, "--fault", arm.fault, "--", *args), dict(arm.env))
    return Command((*SGLANG_LAUNCH, *args), dict(arm.env))


def lm_eval_command(model: ModelSpec, task: TaskSpec, url: str, out: Path, *, limit: int | None,
                    concurrency: int) -> Command:
    """lm-eval against one server: chat models through ``local-chat-completions`` with their chat template
    (few-shot as multi-turn), others through ``local-completions``; greedy (the tasks' own settings)."""
    endpoint = "chat/completions" if model.chat else "completions"
    model_args = (f"model={model.name},base_url={url}/v1/{endpoint},num_concurrent={concurrency},max_retries=3,"
                  f"timeout=7200,tokenized_requests=False" + ("" if model.chat else ",tokenizer_backend=None"))
    argv = ["python", "-m", "lm_eval", "run", "--model", "local-chat-completions" if model.chat else "local-completions",
            "--model_args", model_args, "--tasks", task.lm_eval_task]
    if task.frozen:
        argv += ["--include_path", str(TASKS_INCLUDE)]
    if model.chat:
        argv += ["--apply_chat_template", "--fewshot_as_multiturn", "true"]  # few-shot examples as earlier turns
    if task.name in model.max_gen_toks:
        argv += ["--gen_kwargs", f"max_gen_toks={model.max_gen_toks[task.name]}"]
    if limit is not None:
        argv += ["--limit", str(limit)]
    argv += ["--batch_size", "1", "--log_samples", "--output_path", str(out), "--seed", "0,0,0,0"]
    return Command(tuple(argv), dict(LM_EVAL_ENV))


def _select(names: Sequence[str], known: Mapping[str, Any], what: str) -> list[Any]:
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} listed twice: {', '.join(names)}")
    return [known[n] for n in names]


def _check_fault(fault: str) -> None:
    """The fault must exist in the SGLang-side catalog and be behavioural: a structural-only fault changes no
    output, so it could never turn a comparison RED."""
    from harness.targets.sglang.faults.catalog import get_fault  # imports torch: only when a fault arm is planned

    entry = get_fault(fault)
    if entry.structural_only:
        raise ValueError(f"fault {fault} is structural only ({entry.structural_only}); the fault-demo arm needs one "
                         "that changes outputs")


def build_plan(*, models: Sequence[str | ModelSpec] = DEFAULT_MODELS, arms: Sequence[str] = ARM_NAMES,
               tasks: Sequence[str] = DEFAULT_TASKS, limit: int | None = None, out: Path = DEFAULT_OUT,
               fault: str = DEFAULT_FAULT, port: int = DEFAULT_PORT, concurrency: int = DEFAULT_CONCURRENCY,
               urls: Mapping[str, str] | None = None) -> NightlyPlan:
    """The whole job. ``urls`` maps an arm to a server already running (one model then): not launched.

    Raises ValueError on an unknown model/arm/task, a plan without the ``on`` baseline, a bad limit, or a
    fault the demo cannot use.
    """
    urls = dict(urls or {})
    chosen_models = [m if isinstance(m, ModelSpec) else MODELS.get(m) or ModelSpec(m, chat=False) for m in models]
    if not chosen_models:
        raise ValueError("no model to run")
    known_arms = _arms(fault)
    chosen_arms = _select(list(arms), known_arms, "arm(s)")
    chosen_tasks = _select(list(tasks), TASKS, "task(s)")
    if not chosen_tasks:
        raise ValueError("no task to run")
    if "on" not in arms:
        raise ValueError("the 'on' arm is the baseline of every comparison; it cannot be left out")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    if unknown := sorted(set(urls) - set(arms)):
        raise ValueError(f"--url for arm(s) not in the plan: {', '.join(unknown)}")
    if urls and len(chosen_models) != 1:
        raise ValueError("external servers (--url) serve one model: pass exactly one --model")
    if any(a.fault for a in chosen_arms):
        _check_fault(fault)

    out = Path(out)
    runs = []
    for model in chosen_models:
        for index, arm in enumerate(chosen_arms):
            arm_port = port + index
            external = urls.get(arm.name)
            url = (external or f"http://127.0.0.1:{arm_port}").rstrip("/")
            run_dir = out / model.slug / arm.name
            evals = tuple(
                EvalStep(task, min(limit, task.items) if limit else task.items, task.primary_filter(model),
                         lm_eval_command(model, task, url, run_dir / "lm_eval" / task.name, limit=limit,
                                         concurrency=concurrency), run_dir / "lm_eval" / task.name)
                for task in chosen_tasks)
            runs.append(ArmRun(model, arm, arm_port, None if external else server_command(model, arm, arm_port), url,
                               evals, run_dir))
    comparisons = []
    for model in chosen_models:
        for arm in chosen_arms:
            if arm.role == "baseline":
                continue
            treatment, reference = ("on", arm.name) if arm.role == "reference" else (arm.name, "on")
            comparisons.append(Comparison(model, treatment, reference, arm.expect_red,
                                          out / model.slug / "compare" / f"{treatment}-vs-{reference}"))
    return NightlyPlan(tuple(chosen_models), tuple(chosen_arms), tuple(chosen_tasks), limit, concurrency, out,
                       tuple(runs), tuple(comparisons))


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    line = lambda cells: "  " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(header), "  " + "-+-".join("-" * w for w in widths), *(line(r) for r in rows)]


def render(plan: NightlyPlan) -> str:
    """The plan as text (what ``--dry-run`` prints): arms, tasks, models, every command with its env, comparisons."""
    n_evals = sum(len(r.evals) for r in plan.runs)
    n_servers = sum(r.server is not None for r in plan.runs)
    lines = [f"nightly GPU plan: {len(plan.models)} model(s) x {len(plan.arms)} arm(s) x {len(plan.tasks)} task(s): "
             f"{n_servers} SGLang server(s) launched one at a time, {n_evals} lm-eval run(s), "
             f"{len(plan.comparisons)} comparison(s)",
             f"items: {'first ' + str(plan.limit) + ' per task' if plan.limit else 'whole test sets'}; "
             f"{plan.concurrency} concurrent requests per server; greedy decoding; out: {plan.out}", "", "arms:"]
    lines += _table(("arm", "flags", "env", "compared", "expected", "purpose"), [
        (a.name, " ".join(a.flags) or "(defaults)", " ".join(f"{k}={v}" for k, v in sorted(a.env.items())) or "-",
         "baseline" if a.role == "baseline" else ("on vs " + a.name if a.role == "reference" else a.name + " vs on"),
         "-" if a.role == "baseline" else ("RED" if a.expect_red else "not RED"), a.purpose) for a in plan.arms])
    lines += ["", "tasks:"]
    lines += _table(("task", "lm-eval task", "items", "filter (completions / chat)", "max drop", "source"), [
        (t.name, t.lm_eval_task, str(t.items), f"{t.filter} / {t.chat_filter}",
         "default" if t.max_drop is None else f"{100 * t.max_drop:g} pp", t.source) for t in plan.tasks])
    lines += ["", "models:"]
    lines += _table(("model", "API", "server flags", "max_gen_toks", "note"), [
        (m.name, "chat (local-chat-completions, chat template)" if m.chat else "completions (local-completions)",
         " ".join(m.server_args) or "-", " ".join(f"{k}={v}" for k, v in m.max_gen_toks.items()) or "task defaults",
         m.note) for m in plan.models])
    for i, run in enumerate(plan.runs, 1):
        lines += ["", f"[{i}/{len(plan.runs)}] {run.label}  ({run.dir})"]
        if run.server is None:
            lines.append(f"  server: external, {run.url}")
        else:
            lines += [f"  server: {run.server.shell()}", f"  ready:  GET {run.url}/health (200), log {run.dir / 'server.log'}"]
        for step in run.evals:
            lines.append(f"  {step.task.name} ({step.items} items, filter {step.primary_filter}): {step.command.shell()}")
        if run.server is not None:
            lines.append("  stop:   SIGTERM to the server's process group (SIGKILL after 60 s)")
    lines += ["", "comparisons (paired by item; McNemar exact, paired bootstrap, MDE; verdict per task, worst overall):"]
    lines += _table(("model", "comparison", "ON (treatment)", "OFF (reference)", "expected", "report"), [
        (c.model.name, c.name, c.treatment, c.reference, c.expectation, str(c.dir / "index.html"))
        for c in plan.comparisons])
    lines += ["", f"overview: {plan.out / 'index.html'} (one column per arm), {plan.out / 'summary.json'}",
              "exit code: 0 when every comparison meets its expectation, 1 otherwise"]
    return "\n".join(lines) + "\n"
