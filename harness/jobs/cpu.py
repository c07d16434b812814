"""The CPU main job (``swa-harness eval``): one model, graphs ON vs OFF and prefix cache OFF vs ON, as one plan.

The command line is parsed once into an :class:`EvalConfig` (``harness.jobs.eval_cli``); ``cpu_plan``
turns it into the plan the one runner executes. Three arms: ``on`` (graphs on, the prefix cache on as every
server has it: the baseline), ``off`` (graphs off: the reference, "on vs off") and ``cache-off`` (the baseline with
only its prefix cache switched off: a treatment, "cache-off vs on"), so the job judges two comparisons and its page
is the overview over both. Two servers run side by side (a CPU box), each sent every task in one lm-eval run,
``batch_size`` prompts per request and no concurrency, so the engine always sees the same batches in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from harness.evals.compare import Thresholds
from harness.evals.tasks import FROZEN_TASKS
from harness.env import OFFLINE_ENV
from harness.jobs.plan import Arm, Client, Model, Plan, build_plan
from harness.jobs.plan_file import frozen_task
from harness.paths import DEFAULT_KILL_MATRIX, DEFAULT_MODEL, DEFAULT_OUT

SERVED_NAME = "swa-harness"
FIXED_PORT = 31000  # engines that cannot pick their own port: arm i listens on FIXED_PORT + i
# The graph mode an engine's ON arm asks for when --graphs-on is left at its default.
GRAPHS_ON = {"harness": "auto", "sglang": "on", "vllm": "on"}
# How each engine's server switches its prefix cache off (every one has it on by default).
CACHE_OFF_FLAGS = {
    "harness": ("--prefix-cache", "off"),
    "sglang": ("--disable-radix-cache",),
    "vllm": ("--no-enable-prefix-caching",),
}


def _default_limits() -> dict[str, int]:
    return {name: spec.default_limit for name, spec in FROZEN_TASKS.items()}


@dataclass(frozen=True)
class EvalConfig:
    """Everything ``swa-harness eval`` was asked to do; the defaults are the CLI's defaults."""

    model: Path = DEFAULT_MODEL
    limits: Mapping[str, int] = field(default_factory=_default_limits)  # task name -> items, in run order
    engine: str = "harness"
    graphs_on: str | None = None  # None: the engine's graphs-on mode (GRAPHS_ON)
    fault: str | None = None
    cache_off: bool = True  # the cache-off arm (left out when the baseline is an external server: nothing to copy)
    on_url: str | None = None
    off_url: str | None = None
    out: Path = DEFAULT_OUT
    kill_matrix: Path | None = DEFAULT_KILL_MATRIX
    history: Path | None = None  # the JSON-lines record of every eval; None: history.jsonl beside the out folder
    keep_history: bool = True
    batch_size: int = 32
    max_running: int = 32
    threads: int = 1  # torch threads per server
    device: str = "cpu"
    sequential: bool = False
    resume: bool = False
    resume_trusting_url: bool = False  # --resume against external servers too
    server_timeout: float = 600
    lm_eval_timeout: float = 3600
    thresholds: Thresholds = field(default_factory=Thresholds)
    logprobs: bool = True  # the logprob axis beside accuracy (a recording proxy before each server)
    argv: tuple[str, ...] = ()  # the command line, recorded in the provenance

    @property
    def history_file(self) -> Path | None:
        """Where this eval is recorded and its trend read from (the report's "since when")."""
        if not self.keep_history:
            return None
        return Path(self.history) if self.history else Path(self.out).parent / "history.jsonl"

    @property
    def model_name(self) -> str:
        return Path(self.model).name


def engine_flags(config: EvalConfig) -> tuple[str, ...]:
    """The flags a server of ``config.engine`` gets on this job: the harness server's batch and threads; SGLang's
    and vLLM's CPU recipes on a CPU job."""
    if config.engine == "harness":
        return (
            "--max-running",
            str(config.max_running),
            "--num-threads",
            str(config.threads),
            "--device",
            config.device,
        )
    if config.engine == "sglang":
        from harness.servers.sglang_server import CPU_FLAGS

        return (*CPU_FLAGS, "--max-running-requests", str(config.max_running)) if config.device == "cpu" else ()
    if config.engine == "vllm":
        from harness.servers.vllm import CPU_FLAGS as VLLM_CPU_FLAGS

        return (*VLLM_CPU_FLAGS, "--max-num-seqs", str(config.max_running)) if config.device == "cpu" else ()
    return ()


def cpu_plan(config: EvalConfig) -> Plan:
    """Graphs ON (the baseline, with ``config.fault`` injected if any) vs OFF (the reference), and the baseline with
    its prefix cache off (the same fault, if any: the two differ in the cache alone) vs the baseline, one model."""
    flags = engine_flags(config)
    graphs_on = config.graphs_on or GRAPHS_ON.get(config.engine, "on")

    def engine(url: str | None) -> str:
        return "external" if url else config.engine  # a server someone started: only read

    arms = [
        Arm(
            "on",
            purpose=f"graphs on ({graphs_on}), prefix cache on (the default)",
            engine=engine(config.on_url),
            graphs=graphs_on,
            flags=flags,
            fault=config.fault,
            role="baseline",
            url=config.on_url,
        ),
        Arm(
            "off",
            purpose="graphs off",
            engine=engine(config.off_url),
            graphs="off",
            flags=flags,
            role="reference",
            url=config.off_url,
        ),
    ]
    if config.cache_off and config.on_url is None:
        arms.append(
            Arm(
                "cache-off",
                purpose=f"prefix cache off ({' '.join(CACHE_OFF_FLAGS[config.engine])}), graphs on ({graphs_on}) as the baseline",
                engine=config.engine,
                graphs=graphs_on,
                flags=(*flags, *CACHE_OFF_FLAGS[config.engine]),
                fault=config.fault,
                role="treatment",
            )
        )
    cache = len(arms) > 2
    return build_plan(
        title="main job: graphs on vs off" + (", prefix cache off vs on" if cache else ""),
        models=[Model(str(config.model), served=SERVED_NAME)],
        arms=arms,
        tasks=[frozen_task(name) for name in config.limits],
        out=Path(config.out),
        limit=dict(config.limits),
        client=Client(
            concurrency=1, batch_size=config.batch_size, max_retries=1, timeout_s=1800, samples=True, env=OFFLINE_ENV
        ),
        port=0 if config.engine == "harness" else FIXED_PORT,  # the harness server picks its own and says it
        parallel=1 if config.sequential else 2,
        overview=cache,  # one comparison: its report is the page; two: the overview over both
        one_step_per_arm=True,
        inputs={"eval": {k: getattr(config, k) for k in PLAN_FIELDS}},
    )


PLAN_FIELDS = (
    "model",
    "limits",
    "engine",
    "graphs_on",
    "fault",
    "cache_off",
    "on_url",
    "off_url",
    "out",
    "batch_size",
    "max_running",
    "threads",
    "device",
    "sequential",
)  # what decides the plan (plan.json keeps them)
