"""The nightly GPU job: its models, arms and tasks, as a plan over SGLang servers (``harness.jobs.plan``).

Arms (one SGLang server each, one model at a time, on one GPU):

* ``on``: SGLang's defaults, CUDA graphs on; the baseline of every comparison;
* ``off``: CUDA graphs off for decode and prefill; compared as "graphs on (treatment) vs off (reference)";
* stress arms, graphs on with something that makes an SWA hazard likelier, each compared against ``on``;
* ``fault-demo``: graphs on with a seed fix reverted (an SGLang-side catalog fault patched into the
  server's processes by :mod:`harness.servers.sglang_server.patched_server`); its comparison against ``on`` must
  come out RED, or the job has lost the power to see the regression it exists for.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.env import SGLANG_FAULT_ENV
from harness.evals.tasks import FROZEN_TASKS
from harness.jobs.plan import Arm, Client, Model, Plan, Task, build_plan
from harness.jobs.plan_file import frozen_task

NIGHTLY_OUT = Path("reports/nightly")
DEFAULT_PORT = 30000
DEFAULT_CONCURRENCY = 32  # concurrent requests per server: graph batches of many sizes, so padded rows happen
# The seed regression the fault-demo arm reverts by default: #24743, padded decode-graph rows keep the previous
# replay's write locations. It lives in the CUDA decode graph runner's buffer registry, so graphs on exercise it.
DEFAULT_FAULT = "sglang-registry-out-cache-loc-not-zeroed"
LM_EVAL_ENV = {"TOKENIZERS_PARALLELISM": "false"}  # datasets and weights come from the hub on the runner

MODELS: dict[str, Model] = {
    m.name: m
    for m in (
        Model(
            "openai/gpt-oss-20b",
            chat=True,
            server_args=("--reasoning-parser", "gpt-oss"),
            max_gen_toks={"gsm8k": 8192, "gsm_style": 8192, "aime_style": 8192},
            note="sliding window 128 alternating with full attention; a reasoning model: the reasoning parser keeps "
            "the analysis channel out of the answer, and the budget covers it",
        ),
        Model(
            "google/gemma-4-E2B-it",
            chat=True,
            max_gen_toks={"gsm8k": 2048, "aime25": 4096, "gsm_style": 2048, "aime_style": 2048},
            note="hybrid sliding-window / global attention, instruction-tuned",
        ),
    )
}
DEFAULT_MODELS = ("openai/gpt-oss-20b", "google/gemma-4-E2B-it")


def _arms(fault: str) -> dict[str, Arm]:
    arms = (
        Arm("on", purpose="graphs on: SGLang's defaults (CUDA graphs for decode)", engine="sglang", role="baseline"),
        Arm(
            "off",
            purpose="graphs off for decode and prefill (0.5.23's spelling of the deprecated --disable-cuda-graph)",
            engine="sglang",
            graphs="off",
            role="reference",
            expect={"cuda_graph_backend_decode": "disabled", "cuda_graph_backend_prefill": "disabled"},
        ),
        Arm(
            "no-graph-padding",
            purpose="stress: no padding to a captured batch size (other batch shapes replay or fall back to eager)",
            engine="sglang",
            flags=("--disable-cuda-graph-padding",),
            expect={"disable_cuda_graph_padding": True},
        ),
        Arm(
            "swa-ratio-0.1",
            purpose="stress: SWA pool a tenth of the full pool, so SWA slots are evicted and reused often",
            engine="sglang",
            flags=("--swa-full-tokens-ratio", "0.1"),
            expect={"swa_full_tokens_ratio": 0.1},
        ),
        Arm(
            "invariant-check",
            purpose="stress: SGLang's invariant checks at STRICT (crash on a violated index or value invariant)",
            engine="sglang",
            env={"SGLANG_INVARIANT_CHECK": "2"},
        ),
        Arm(
            "fault-demo",
            purpose=f"seed fix reverted: catalog fault {fault} patched into every server process; must be RED",
            engine="sglang",
            fault=fault,
            env={SGLANG_FAULT_ENV: fault},
            expect_red=True,
        ),
    )
    return {a.name: a for a in arms}


ARM_NAMES = tuple(_arms(DEFAULT_FAULT))

TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task(
            name="gsm8k",
            lm_eval_task="gsm8k",
            items=1319,
            filter="strict-match",
            chat_filter="flexible-extract",
            frozen=False,
            source="lm-eval built-in, hub dataset openai/gsm8k (test, 5-shot)",
        ),
        # 30 items: one item is 3.3 pp, so the default 2 pp tolerance would make a single flip from GPU numerics RED;
        # up to 3 net items are tolerated unless McNemar finds the drop significant (RED then, as everywhere).
        Task(
            name="aime25",
            lm_eval_task="aime25",
            items=30,
            filter="none",
            chat_filter="none",
            frozen=False,
            source="lm-eval built-in, hub dataset math-ai/aime25 (0-shot)",
            max_drop=0.1,
        ),
        *(frozen_task(name) for name in FROZEN_TASKS),
    )
}
DEFAULT_TASKS = ("gsm8k", "aime25", "gsm_style", "aime_style")


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
    from harness.targets.sglang.faults.by_id import get_fault  # imports torch: only when a fault arm is planned

    entry = get_fault(fault)
    if entry.structural_only:
        raise ValueError(
            f"fault {fault} is structural only ({entry.structural_only}); the fault-demo arm needs one "
            "that changes outputs"
        )


def build_nightly_plan(
    *,
    models: Sequence[str | Model] = DEFAULT_MODELS,
    arms: Sequence[str] = ARM_NAMES,
    tasks: Sequence[str] = DEFAULT_TASKS,
    limit: int | None = None,
    out: Path = NIGHTLY_OUT,
    fault: str = DEFAULT_FAULT,
    port: int = DEFAULT_PORT,
    concurrency: int = DEFAULT_CONCURRENCY,
    urls: Mapping[str, str] | None = None,
) -> Plan:
    """The whole nightly. ``urls`` maps an arm to a server already running (one model then): not launched.

    Raises ValueError on an unknown model/arm/task, a plan without the ``on`` baseline, a bad limit, or a
    fault the demo cannot use.
    """
    urls = dict(urls or {})
    chosen_models = [m if isinstance(m, Model) else MODELS.get(m) or Model(m, chat=False) for m in models]
    chosen_arms = _select(list(arms), _arms(fault), "arm(s)")
    chosen_tasks = _select(list(tasks), TASKS, "task(s)")
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
    chosen_arms = [replace(a, url=urls[a.name]) if a.name in urls else a for a in chosen_arms]
    return build_plan(
        title="nightly GPU plan",
        models=chosen_models,
        arms=chosen_arms,
        tasks=chosen_tasks,
        out=Path(out),
        limit=limit,
        port=port,
        client=Client(concurrency=concurrency, batch_size=1, env=LM_EVAL_ENV),
        inputs={
            "nightly": {
                "models": [m.name for m in chosen_models],
                "arms": list(arms),
                "tasks": list(tasks),
                "limit": limit,
                "out": str(out),
                "fault": fault,
                "port": port,
                "concurrency": concurrency,
                "urls": urls,
            }
        },
    )
