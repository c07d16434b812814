"""An accuracy job as data: models x arms -> one server each, tasks scored by lm-eval, pairings compared.

Everything a job will do is decided here, before anything runs, so a plan can be printed (``--dry-run``),
saved beside its results (``plan.json``, so saved runs can be judged again) and checked by tests
without an engine. A plan is deterministic: the same options give the same plan (fixed ports where the
engine needs one, paths relative to the checkout, ``python`` rather than this interpreter's path).

* an **arm** is one server configuration: its engine (``harness``, ``sglang``, ``vllm``; an external URL),
  graph mode, flags, environment, an injected fault, and its role: the ``baseline`` (``on``), a
  ``reference`` (compared as "on vs it", e.g. graphs off) or a ``treatment`` (compared as "it vs on", e.g.
  a stress arm, or a fault demo that must come out RED);
* a **task** is an lm-eval task and the filter that decides correctness;
* every (model, arm) is one **run**: one server, and one or more lm-eval steps against it;
* every non-baseline arm gives one **comparison** per model, paired item by item.

``build_plan`` is the one builder: the CPU main job (``harness.jobs.cpu``), the GPU nightly
(``harness.jobs.nightly``) and a YAML plan file (``harness.jobs.plan_file``) all go through it; ``harness.jobs.plan_text``
prints a plan (``--dry-run``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.evals.results import ServedIdentity
from harness.evals.tasks import Output
from harness.paths import REPO
from harness.servers.base import ServerKind, ServerSpec
from harness.servers.lifecycle import Command
from harness.servers.registry import get_server_kind

TASKS_INCLUDE = Path("suites/accuracy")  # the frozen GSM/AIME-style task YAMLs, relative to the checkout
ROLES = ("baseline", "reference", "treatment")


@dataclass(frozen=True)
class Model:
    """A model every arm serves. ``chat`` models are asked through ``/v1/chat/completions`` with their chat
    template (lm-eval's ``local-chat-completions --apply_chat_template``)."""

    name: str  # a checkpoint folder (relative to the checkout or absolute) or a hub id
    chat: bool = False
    served: str | None = None  # the ``model`` clients send (default: ``name``)
    server_args: tuple[str, ...] = ()  # flags every arm of this model gets
    max_gen_toks: Mapping[str, int] = field(default_factory=dict)  # task -> generation budget (else the task's own)
    note: str = ""

    @property
    def slug(self) -> str:
        """A checkpoint folder by its name, a hub id (``org/name``, no such folder here) with its slash as ``--``."""
        local = (
            Path(self.name).is_absolute()
            or self.name.startswith(".")
            or self.name.count("/") > 1
            or self.checkpoint.is_dir()
        )
        return Path(self.name).name if local else self.name.replace("/", "--")

    @property
    def checkpoint(self) -> Path:
        """Its checkpoint folder, a relative name taken in the checkout (where servers run); no folder for a hub id."""
        return REPO / self.name

    @property
    def served_name(self) -> str:
        return self.served or self.name


@dataclass(frozen=True)
class Arm:
    """One server configuration. ``expect`` names the server-argument fields its flags must set (checked with
    the engine's own parser where it has one); ``url`` is a server already running (nothing is launched)."""

    name: str
    purpose: str
    engine: str = "harness"
    graphs: str = "on"
    flags: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    fault: str | None = None
    role: str = "treatment"
    expect_red: bool = False
    expect: Mapping[str, Any] = field(default_factory=dict)
    url: str | None = None

    @property
    def kind(self) -> ServerKind:
        """Its engine's server kind: how its server starts, stops, names its graph mode and says what it serves."""
        return get_server_kind(self.engine)

    @property
    def server_flags(self) -> tuple[str, ...]:
        """Its flags as its engine's command line gets them: its own, then those that set its graph mode."""
        return (*self.flags, *self.kind.graph_flags(self.graphs, self.flags))

    def resume_refused(self, *, trust_url: bool) -> str | None:
        """Why ``--resume`` cannot reuse its cached answers, in one line naming the arm and what to say instead: it is
        an external server (it says what it serves, not what it was launched with, and another server may answer at
        its address later) the user has not said to trust. None when it can. The runner asks before the job starts;
        the response cache (``harness.jobs.cache``) asks again, so that it refuses by itself too."""
        if self.url and not trust_url:
            return (
                f"--resume: arm {self.name} is the external server {self.url}, which cannot say what it was "
                "launched with; add --resume-trusting-url, or drop --resume"
            )
        return None


@dataclass(frozen=True)
class Task:
    """One lm-eval task: frozen in ``suites/accuracy`` (``frozen``) or built into lm-eval (a hub dataset)."""

    name: str  # the task's name in runs and reports
    lm_eval_task: str
    items: int  # size of the whole test set
    filter: str  # the filter whose exact match decides correctness, for completions models
    chat_filter: str  # the same for chat models (they do not reliably keep the few-shot "#### N" format)
    frozen: bool
    source: str
    max_drop: float | None = None  # the comparison's tolerated unproven drop for this task (None: the default)
    output: Output = "generate_until"  # multiple_choice: scored by loglikelihood (echo requests), never generated

    @property
    def scored(self) -> bool:
        return self.output == "multiple_choice"

    def primary_filter(self, model: Model) -> str:
        return self.chat_filter if model.chat else self.filter


@dataclass(frozen=True)
class Client:
    """How lm-eval talks to every server. ``samples``: select items by ``--samples`` (several tasks in one lm-eval
    run, each with its own count), else by ``--limit`` (one run per task)."""

    concurrency: int = 1
    batch_size: int = 1
    max_retries: int = 3
    timeout_s: int = 7200
    samples: bool = False
    env: Mapping[str, str] = field(default_factory=lambda: {"TOKENIZERS_PARALLELISM": "false"})


@dataclass(frozen=True)
class EvalStep:
    """One lm-eval run against one server: its tasks, the items each scores and the filter that counts."""

    tasks: tuple[Task, ...]
    items: Mapping[str, int]  # task name -> items scored
    filters: Mapping[str, str]  # task name -> primary filter
    out: Path  # lm-eval's --output_path
    model: Model
    client: Client
    limited: bool  # the plan set a limit (else whole sets: no --limit/--samples)

    @property
    def name(self) -> str:
        return "+".join(t.name for t in self.tasks)

    @property
    def log_name(self) -> str:
        """Its log beside the run's server log: named like its output folder (a task, or ``all``)."""
        return f"lm_eval-{self.out.name}.log"

    def command(self, url: str, cache: Path | None = None) -> Command:
        """lm-eval against ``url``: chat models through ``local-chat-completions`` with their chat template
        (few-shot as multi-turn), others through ``local-completions``; greedy (the tasks' own settings)."""
        model, client = self.model, self.client
        endpoint = "chat/completions" if model.chat else "completions"
        model_args = (
            f"model={model.served_name},base_url={url}/v1/{endpoint},num_concurrent={client.concurrency},"
            f"max_retries={client.max_retries},timeout={client.timeout_s},"
        )
        if any(t.scored for t in self.tasks):  # lm-eval splits context from choice in token ids: the tokenizer
            model_args += f"tokenized_requests=True,tokenizer_backend=huggingface,tokenizer={model.name}"
        else:
            model_args += "tokenized_requests=False" + ("" if model.chat else ",tokenizer_backend=None")
        argv = ["python", "-m", "lm_eval", "run"]
        argv += ["--model", "local-chat-completions" if model.chat else "local-completions", "--model_args", model_args]
        argv += ["--tasks", ",".join(t.lm_eval_task for t in self.tasks)]
        if any(t.frozen for t in self.tasks):
            argv += ["--include_path", str(TASKS_INCLUDE)]
        if model.chat:
            argv += ["--apply_chat_template", "--fewshot_as_multiturn", "true"]  # few-shot examples as earlier turns
        budgets = {model.max_gen_toks[t.name] for t in self.tasks if t.name in model.max_gen_toks}
        if budgets:
            argv += ["--gen_kwargs", f"max_gen_toks={max(budgets)}"]
        if self.limited and client.samples:
            argv += ["--samples", json.dumps({t.lm_eval_task: list(range(self.items[t.name])) for t in self.tasks})]
        elif self.limited:
            argv += ["--limit", str(self.items[self.tasks[0].name])]
        argv += ["--batch_size", str(client.batch_size), "--log_samples", "--output_path", str(self.out)]
        argv += ["--seed", "0,0,0,0"]
        if cache is not None:
            argv += ["--use_cache", str(cache)]
        return Command(tuple(argv), dict(client.env))


@dataclass(frozen=True)
class ArmRun:
    """One server (model, arm) and the lm-eval runs against it."""

    model: Model
    arm: Arm
    port: int
    url: str | None  # where it listens: planned, external, or None when the server picks its port
    evals: tuple[EvalStep, ...]
    dir: Path

    @property
    def key(self) -> str:
        return f"{self.model.slug}/{self.arm.name}"

    @property
    def label(self) -> str:
        return f"{self.model.name} · {self.arm.name}"

    @property
    def launched(self) -> bool:
        return self.arm.url is None

    @property
    def spec(self) -> ServerSpec:
        """What the arm asks of its engine."""
        arm = self.arm
        return ServerSpec(
            model=self.model.name,
            served_name=self.model.served_name,
            graphs=arm.graphs,
            flags=(*self.model.server_args, *arm.flags),
            env=dict(arm.env),
            fault=arm.fault,
            port=self.port,
            url=arm.url,
        )

    @property
    def server(self) -> Command | None:
        """The server's command line (None for an external server)."""
        if not self.launched:
            return None
        return self.arm.kind.command(self.spec)


@dataclass(frozen=True)
class Comparison:
    model: Model
    treatment: str  # arm compared as "ON" (the one that may be broken)
    reference: str  # arm compared as "OFF"
    expect_red: bool
    dir: Path  # where its report goes

    @property
    def name(self) -> str:
        return f"{self.treatment}-vs-{self.reference}"

    @property
    def expectation(self) -> str:
        return "RED (a known fault or finding must show)" if self.expect_red else "not RED"

    def served_differences(self, serves: Mapping[tuple[str, str], ServedIdentity]) -> list[str]:
        """How its two arms serve different weights or tokenizers (their difference would be no graph effect), where
        ``serves`` (model slug, arm) -> what that arm serves knows both: the one rule before the job and after it."""
        on, off = serves.get((self.model.slug, self.treatment)), serves.get((self.model.slug, self.reference))
        return on.model_differences(off) if on is not None and off is not None else []


@dataclass(frozen=True)
class Plan:
    title: str
    models: tuple[Model, ...]
    arms: tuple[Arm, ...]
    tasks: tuple[Task, ...]
    limit: int | Mapping[str, int] | None  # items per task: one number, per task, or None (whole sets)
    client: Client
    out: Path
    runs: tuple[ArmRun, ...]
    comparisons: tuple[Comparison, ...]
    parallel: int = 1  # servers running at once (one GPU: 1)
    overview: bool = True  # a front page over every comparison (else the one comparison's report is the page)
    inputs: Mapping[str, Any] = field(default_factory=dict)  # what build_plan was given: plan.json rebuilds from it

    @property
    def concurrency(self) -> int:
        return self.client.concurrency

    def run_for(self, model: Model, arm: str) -> ArmRun:
        return next(r for r in self.runs if r.model == model and r.arm.name == arm)

    def to_dict(self) -> dict[str, Any]:
        return {
            "models": [
                {
                    "name": m.name,
                    "chat": m.chat,
                    "server_args": list(m.server_args),
                    "max_gen_toks": dict(m.max_gen_toks),
                    "note": m.note,
                }
                for m in self.models
            ],
            "arms": [
                {
                    "name": a.name,
                    "purpose": a.purpose,
                    "engine": a.engine,
                    "graphs": a.graphs,
                    "flags": list(a.flags),
                    "env": dict(a.env),
                    "fault": a.fault,
                    "role": a.role,
                    "expect_red": a.expect_red,
                }
                for a in self.arms
            ],
            "tasks": [_jsonable(t) for t in self.tasks],  # every field, in order
            "limit": self.limit if not isinstance(self.limit, Mapping) else dict(self.limit),
            "concurrency": self.concurrency,
            "out": str(self.out),
            "runs": [
                {
                    "model": r.model.name,
                    "arm": r.arm.name,
                    "url": r.url,
                    "server": r.server.to_dict() if r.server else None,
                    "evals": [
                        {
                            "task": e.name,
                            "items": sum(e.items.values()),
                            "filter": "/".join(e.filters.values()),
                            "out": str(e.out),
                            **e.command(r.url or "<url>").to_dict(),
                        }
                        for e in r.evals
                    ],
                }
                for r in self.runs
            ],
            "comparisons": [
                {
                    "model": c.model.name,
                    "name": c.name,
                    "treatment": c.treatment,
                    "reference": c.reference,
                    "expect": c.expectation,
                    "report": str(c.dir / "index.html"),
                }
                for c in self.comparisons
            ],
            "report": str(self.out / "index.html"),
            "inputs": _jsonable(self.inputs),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n"


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _jsonable(getattr(value, f.name)) for f in fields(value)}
    return value


# -- the one builder -------------------------------------------------------------------------------------


def _unique(items: Sequence[Any], what: str) -> None:
    names = [i.name for i in items]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f"{what} listed twice: {', '.join(twice)}")


def _items_for(task: Task, limit: int | Mapping[str, int] | None) -> int:
    wanted = limit.get(task.name) if isinstance(limit, Mapping) else limit
    if wanted is None:
        return task.items
    if wanted < 1:
        raise ValueError(f"limit must be at least 1, got {wanted} for {task.name}")
    return min(wanted, task.items)


def build_plan(
    *,
    title: str,
    models: Sequence[Model],
    arms: Sequence[Arm],
    tasks: Sequence[Task],
    out: Path,
    limit: int | Mapping[str, int] | None = None,
    client: Client = Client(),
    port: int = 0,
    parallel: int = 1,
    overview: bool = True,
    one_step_per_arm: bool = False,
    inputs: Mapping[str, Any] | None = None,
) -> Plan:
    """The whole job. ``port``: the first server's port, arm i of a model on ``port + i`` (0: each server picks
    its own and reports it). ``one_step_per_arm``: all tasks in one lm-eval run per server (else one per task).

    Raises ValueError on an empty or duplicated model/arm/task list, a plan without exactly one baseline, an
    unknown role, a bad limit or concurrency, or an external arm across several models.
    """
    if not models:
        raise ValueError("no model to run")
    if not tasks:
        raise ValueError("no task to run")
    _unique(models, "model(s)")
    _unique(arms, "arm(s)")
    _unique(tasks, "task(s)")
    if bad := [a.name for a in arms if a.role not in ROLES]:
        raise ValueError(f"arm(s) {', '.join(bad)} have no role among {', '.join(ROLES)}")
    baselines = [a for a in arms if a.role == "baseline"]
    if len(baselines) != 1:
        raise ValueError(
            f"a plan needs exactly one baseline arm (compared against every other), got "
            f"{len(baselines)}: {', '.join(a.name for a in baselines) or 'none'}"
        )
    if client.concurrency < 1 or client.batch_size < 1:
        raise ValueError(
            f"concurrency and batch size must be at least 1, got {client.concurrency}, {client.batch_size}"
        )
    if any(a.url for a in arms) and len(models) != 1:
        raise ValueError("external servers (url) serve one model: plan exactly one model")
    if (chat := [m.name for m in models if m.chat]) and (scored := [t.name for t in tasks if t.scored]):
        raise ValueError(
            f"task(s) {', '.join(scored)} are scored by loglikelihood, which lm-eval's chat client has "
            f"not: chat model(s) {', '.join(chat)}"
        )
    if isinstance(limit, Mapping) and (unknown := sorted(set(limit) - {t.name for t in tasks})):
        raise ValueError(f"limit for task(s) not in the plan: {', '.join(unknown)}")
    items = {t.name: _items_for(t, limit) for t in tasks}

    out = Path(out)
    runs = []
    for model in models:
        for index, arm in enumerate(arms):
            arm_port = port + index if port and arm.url is None else 0
            url = arm.url.rstrip("/") if arm.url else (f"http://127.0.0.1:{arm_port}" if arm_port else None)
            run_dir = out / model.slug / arm.name
            # One lm-eval run per output type: loglikelihood's token-id prompts would change what generations carry.
            kinds = (tuple(t for t in tasks if not t.scored), tuple(t for t in tasks if t.scored))
            groups = [g for g in kinds if g] if one_step_per_arm else [(t,) for t in tasks]
            evals = tuple(
                EvalStep(
                    tasks=group,
                    items={t.name: items[t.name] for t in group},
                    filters={t.name: t.primary_filter(model) for t in group},
                    out=run_dir / "lm_eval" / ("all" if one_step_per_arm and g == 0 else group[0].name),
                    model=model,
                    client=client,
                    limited=limit is not None,
                )
                for g, group in enumerate(groups)
            )
            runs.append(ArmRun(model=model, arm=arm, port=arm_port, url=url, evals=evals, dir=run_dir))
    baseline = baselines[0].name
    comparisons = []
    for model in models:
        for arm in arms:
            if arm.role == "baseline":
                continue
            treatment, reference = (baseline, arm.name) if arm.role == "reference" else (arm.name, baseline)
            where = out / model.slug / "compare" / f"{treatment}-vs-{reference}" if overview else out
            comparisons.append(
                Comparison(model=model, treatment=treatment, reference=reference, expect_red=arm.expect_red, dir=where)
            )
    if not overview and len(comparisons) != 1:
        raise ValueError(f"a plan without an overview page has one comparison, this one has {len(comparisons)}")
    return Plan(
        title=title,
        models=tuple(models),
        arms=tuple(arms),
        tasks=tuple(tasks),
        limit=limit,
        client=client,
        out=out,
        runs=tuple(runs),
        comparisons=tuple(comparisons),
        parallel=parallel,
        overview=overview,
        inputs=dict(inputs or {}),
    )
