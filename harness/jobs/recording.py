"""What a judged comparison leaves behind: its provenance, its line in the history (and the trend it is part of) and
its HTML report, with the other jobs' files (kill matrices, mutation runs, fault effects, release matrix) read once
beside it.

The provenance is enough to reproduce a comparison, or to see why two runs differ. It is grouped for the top of the
report: the engine under test (this checkout's git sha and dirty flag when the harness served, else what the servers
report, e.g. SGLang's version), the model and its file hashes, each arm's engine, identity, server command and
environment, the hardware, the software versions and the dataset hashes. It is computed after the runs, so the server
and lm-eval command lines are read from the logs the runs wrote rather than reconstructed. Nothing here may fail the
job: unknowns say so.
"""

from __future__ import annotations

import copy
import os
import platform
import re
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from harness.env import SGLANG_PATCH_ENV, SGLANG_SOURCE_ENV
from harness.evals.history import Trend, make_entry
from harness.evals.history import record as record_history
from harness.evals.history import trend as history_trend
from harness.evals.results import RunResult, ServedIdentity
from harness.jobs.judging import Judged
from harness.jobs.options import RunOptions
from harness.jobs.plan import ArmRun, Model, Plan
from harness.paths import DATA_DIR, TASKS_DIR, shown
from harness.report import render_report
from harness.report.inputs import (
    FaultEffects,
    KillMatrixFile,
    MutationRunFile,
    ReleaseMatrix,
    load_fault_effects,
    load_kill_matrices,
    load_mutation_runs,
    load_release_matrix,
)
from harness.reuse import checkout_state, file_sha256

# Environment variables that change what an arm computes; secrets never enter the record.
_ENV_PREFIXES = ("SWA_HARNESS_", "OMP_", "MKL_", "CUDA_", "TORCH", "PYTORCH_", "HF_", "TOKENIZERS_", "SGLANG", "VLLM_")
_SECRET = re.compile(r"(^|_)(TOKEN|KEY|SECRET|PASSWORD|PASS|AUTH|CREDENTIALS?)($|_)")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _sglang_source() -> dict[str, Any]:
    """The SGLang under test when ``SWA_HARNESS_SGLANG`` names a release or a local checkout."""
    spec = os.environ.get(SGLANG_SOURCE_ENV)
    if not spec:
        return {}
    source: dict[str, Any] = {"spec": spec}
    if Path(spec).is_dir():
        source.update(checkout_state(Path(spec)))
    if os.environ.get(SGLANG_PATCH_ENV):
        source["patch"] = os.environ[SGLANG_PATCH_ENV]
    return {"sglang source": source}


def engine_under_test(arms: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """This checkout when the harness served every arm, else what the servers report (their identity)."""
    harness = checkout_state()
    short = harness["commit"][:10] + (" (dirty)" if harness["dirty"] else "")
    if all(a.get("engine") == "harness" and not a.get("url") for a in arms.values()):
        return {"summary": f"harness {short}", "kind": "harness engine of this checkout", **harness}
    versions = {label: str((a.get("identity") or {}).get("version") or "unknown") for label, a in arms.items()}

    def named(engine: str, version: str) -> str:  # "sglang 0.5.23" as SGLang says it; vLLM's /version is bare
        return version if engine == "external" or version.startswith(engine) else f"{engine} {version}"

    names = sorted({named(str(arms[label].get("engine")), v) for label, v in versions.items() if v != "unknown"})
    return {
        "summary": " / ".join(names) if names else "external server (version unknown)",
        "kind": "servers of " + ", ".join(dict.fromkeys(str(a.get("engine")) for a in arms.values())),
        "servers": {label: f"{a.get('url') or 'launched'} — {versions[label]}" for label, a in arms.items()},
        "harness (orchestration)": short,
        **_sglang_source(),
    }


def model_provenance(model: Model) -> dict[str, Any]:
    """The checkpoint and the digests of the files that decide its answers (a hub id: its name only)."""
    folder = model.checkpoint
    if not folder.is_dir():
        return {"name": model.name, "source": "hub"}
    files = {f: file_sha256(folder / f) for f in ("model.safetensors", "config.json", "tokenizer.json")}
    return {
        "name": folder.name,
        "checkpoint": shown(folder),
        **{f"{f} sha256": digest or "n/a" for f, digest in files.items()},
    }


def _first_line(path: Path) -> str:
    """A log's first line without its ``$ ``: the command the run logged before starting it."""
    try:
        with open(path, encoding="utf-8") as fh:
            line = fh.readline().strip()
    except OSError:
        return "n/a (no log)"
    return line[2:] if line.startswith("$ ") else (line or "n/a (empty log)")


def relevant_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables of ``_ENV_PREFIXES`` set in ``environ``, secrets left out by name."""
    return {k: v for k, v in sorted(environ.items()) if k.startswith(_ENV_PREFIXES) and not _SECRET.search(k)}


def arm_provenance(run: ArmRun, identity: ServedIdentity | None) -> dict[str, Any]:
    """One arm: engine, graph mode and fault, what its server reported (``identity``), its command line and
    environment, lm-eval's commands."""
    out: dict[str, Any] = {
        "arm": run.arm.name,
        "engine": run.arm.engine,
        "graphs": run.arm.graphs,
        "purpose": run.arm.purpose,
        "fault": run.arm.fault or "none",
    }
    if identity is not None:
        out["identity"] = identity.to_dict()
    if run.launched:
        out["server command"] = _first_line(run.dir / "server.log")
        server = run.server
        out["env"] = relevant_env({**os.environ, **(server.env if server else {})})
    else:
        out["url"] = run.arm.url
        out["server"] = f"external: {run.arm.url}"
    for step in run.evals:
        out[f"lm-eval command ({step.name})" if len(run.evals) > 1 else "lm-eval command"] = _first_line(
            run.dir / step.log_name
        )
    return out


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.0f} GiB"
    except (OSError, ValueError):
        pass
    return "unknown"


def hardware(device: str) -> dict[str, Any]:
    """This machine (the one that launched the servers); the GPU only when the eval ran on one."""
    info: dict[str, Any] = {
        "device": device,
        "cpu": _cpu_model(),
        "logical cores": os.cpu_count() or 0,
        "memory": _memory(),
        "machine": platform.machine(),
    }
    if device.startswith("cuda"):
        try:
            import torch  # imported here: only a GPU run needs it

            info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cuda not available"
        except Exception as exc:  # noqa: BLE001 - provenance must not fail the run
            info["gpu"] = f"unknown ({type(exc).__name__})"
    return info


# A task YAML's helper: ``custom_dataset: !function choice_utils.load_choice_style`` names choice_utils.py beside it.
_HELPER = re.compile(r"!function\s+(\w+)\.\w+")


def dataset_hashes(tasks: Iterable[str]) -> dict[str, dict[str, str]]:
    """sha256 (first 16 hex) of each frozen task's YAML, the helper modules it names (its loader: which items, in which
    order, with which text) and its data files: a changed set shows here, and misses the resume key."""
    out: dict[str, dict[str, str]] = {}
    for name in tasks:
        yaml = TASKS_DIR / f"{name}.yaml"
        if not yaml.exists():
            continue
        helpers = dict.fromkeys(TASKS_DIR / f"{module}.py" for module in _HELPER.findall(yaml.read_text()))
        files = [yaml, *helpers, *sorted((DATA_DIR / name).glob("*.jsonl"))]
        out[name] = {f.name: (file_sha256(f) or "missing")[:16] for f in files if f.exists()}
    return out


def job_provenance(plan: Plan, command: str, device: str) -> dict[str, Any]:
    """What every comparison of the job shares: the run (``command`` as typed), the hardware, the software,
    the data sets."""
    now = datetime.now(timezone.utc)
    limit = plan.limit
    return {
        "run": {
            "id": f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}",
            "recorded at": now.isoformat(timespec="seconds"),
            "command": command,
            "items": (
                "whole test sets"
                if limit is None
                else f"first {limit} per task"
                if isinstance(limit, int)
                else ", ".join(f"{k}={v}" for k, v in limit.items())
            ),
            "decoding": "greedy (temperature 0), lm-eval seed 0",
            "lm-eval requests": f"{plan.client.batch_size} prompts per request, {plan.concurrency} concurrent per server",
        },
        "hardware": hardware(device),
        "software": {
            "python": platform.python_version(),
            "torch": _version("torch"),
            "lm-eval": _version("lm_eval"),
            **{name: _version(name) for name in ("sglang", "vllm") if _version(name) != "not installed"},
            "platform": platform.platform(),
        },
        "datasets": dataset_hashes(t.name for t in plan.tasks if t.frozen),
    }


def comparison_provenances(
    plan: Plan, runs: Sequence[RunResult], base: Mapping[str, Any]
) -> dict[tuple[str, str], dict[str, Any]]:
    """The whole record of each comparison (saved with its runs, kept in the history, shown on top of its report), by
    (model slug, comparison name). Each arm's part and each model's is gathered once for the job, however many
    comparisons share it (a checkpoint's files are hashed once); ``base`` is what every comparison shares."""
    by_key = {(r.model, r.record.arm, r.task): r for r in runs}

    def identity(run: ArmRun) -> ServedIdentity | None:  # what its server reported, as its first task's run saved it
        key = (run.model.slug, run.arm.name)
        return next((r.record.identity for t in plan.tasks if (r := by_key.get((*key, t.name)))), None)

    arms = {(run.model.slug, run.arm.name): arm_provenance(run, identity(run)) for run in plan.runs}
    models = {model.name: model_provenance(model) for model in plan.models}
    return {
        (c.model.slug, c.name): _comparison_record(
            on=arms[c.model.slug, c.treatment],
            off=arms[c.model.slug, c.reference],
            model=models[c.model.name],
            base=base,
        )
        for c in plan.comparisons
    }


def _comparison_record(
    *, on: Mapping[str, Any], off: Mapping[str, Any], model: Mapping[str, Any], base: Mapping[str, Any]
) -> dict[str, Any]:
    """One comparison's record from its arms' parts and its model's: a new dict each, nothing shared between two."""
    arms = {"on": copy.deepcopy(dict(on)), "off": copy.deepcopy(dict(off))}
    engine = engine_under_test(arms)  # what the arms ran, then the model they ran: the record's order
    model = dict(model)
    served = {side: (arm.get("identity") or {}).get("weights") for side, arm in arms.items()}
    if any(served.values()):  # what the servers said they loaded, beside what this checkout holds
        model["weights served"] = {side: weights or "not reported" for side, weights in served.items()}
    out = {"run": dict(base.get("run", {})), "engine under test": engine, "model": model, "arms": arms}
    return out | {k: v for k, v in base.items() if k not in out}


# -- the history and the report -------------------------------------------------------------------------


@dataclass(frozen=True)
class SideInputs:
    """What the report shows beside the comparison, read from other jobs' files once per ``finish``."""

    kill_matrices: list[KillMatrixFile]
    fault_effects: FaultEffects | None
    release_matrix: ReleaseMatrix | None
    mutation_runs: list[MutationRunFile] = field(default_factory=list)  # reports/mutants-*.json beside the matrices

    @classmethod
    def read(cls, options: RunOptions) -> SideInputs:
        return cls(
            kill_matrices=load_kill_matrices(options.kill_matrix),
            fault_effects=load_fault_effects(options.fault_effects),
            release_matrix=load_release_matrix(options.release_matrix),
            mutation_runs=load_mutation_runs(options.kill_matrix),
        )


@dataclass(frozen=True)
class Recorded:
    """What one judged comparison left: the trend its history line is now part of (None: no history kept) and its
    HTML report."""

    trend: Trend | None
    report: Path


def record_comparison(
    judged: Judged,
    provenance: Mapping[str, Any],
    *,
    history: Path | None,
    side: SideInputs,
    several: bool = False,
) -> Recorded:
    """The comparison's line in the history, then its HTML report (which shows the trend).

    The comparisons of one job share its run id; with ``several`` each line's id names its comparison too, so that
    one comparison's line does not replace another's (and judging the same runs again replaces each its own)."""
    trend = None
    if history is not None:
        entry = make_entry(judged.tasks, judged.summary, judged.runs, provenance)
        if several:
            c = judged.comparison
            entry = replace(entry, run_id=f"{entry.run_id} {c.model.slug}/{c.name}")
        trend = history_trend(record_history(Path(history), entry), entry)
    report = render_report(
        judged.tasks,
        judged.runs,
        summary=judged.summary,
        provenance=provenance,
        out_dir=judged.comparison.dir,
        trend=trend,
        kill_matrices=side.kill_matrices,
        mutation_runs=side.mutation_runs,
        fault_effects=side.fault_effects,
        release_matrix=side.release_matrix,
        tokenize=judged.tokenize,
    )
    return Recorded(trend, report)
