"""A plan file (``--plan FILE``): a YAML (or JSON) mapping of ``build_plan``'s keyword arguments, read into a
``Plan``; every error names the file and the key. ``plan.json`` (saved beside a job's results) is read the same way.
A task named by its name alone is a frozen task (``frozen_task``), as the CPU job and the nightly name theirs.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping

import yaml

from harness.evals.tasks import frozen_spec, set_size
from harness.jobs.plan import Arm, Client, Model, Plan, Task, build_plan
from harness.paths import REPO

_PLAN_KEYS = {
    "title",
    "models",
    "arm_defaults",
    "arms",
    "tasks",
    "limit",
    "client",
    "out",
    "port",
    "parallel",
    "overview",
    "one_step_per_arm",
}


def _record(cls: type, data: Any, where: str) -> Any:
    """``cls(**data)`` with lists as tuples; an unknown key is an error that names it."""
    if isinstance(data, str) and cls is Model:
        data = {"name": data}
    if not isinstance(data, Mapping):
        raise ValueError(f"{where}: expected a mapping, got {type(data).__name__}")
    known = {f.name for f in fields(cls)}
    if unknown := sorted(set(data) - known):
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def frozen_task(name: str) -> Task:
    """A frozen task of ``suites/accuracy`` (its whole set; a plan's limit cuts it)."""
    spec = frozen_spec(name)
    return Task(
        name=spec.name,
        lm_eval_task=spec.lm_eval_task,
        items=set_size(spec),
        filter=spec.primary_filter,
        chat_filter="flexible-extract",
        frozen=True,
        source=f"frozen {spec.name} set, suites/accuracy/{spec.name}.yaml over fixtures/data",
        output=spec.output,
    )


def plan_from_mapping(data: Mapping[str, Any], where: str = "plan") -> Plan:
    """A plan from its YAML/JSON form: the keyword arguments of ``build_plan``; a task may be a frozen task's
    name, a model a checkpoint path or hub id; ``arm_defaults`` go into every arm (its flags before the arm's own)."""
    if unknown := sorted(set(data) - _PLAN_KEYS):
        raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(_PLAN_KEYS))}")
    tasks = []
    for i, task in enumerate(data.get("tasks") or ()):
        if isinstance(task, str):
            try:
                tasks.append(frozen_task(task))
            except KeyError as unknown:
                raise ValueError(f"{where}: task {unknown.args[0]}; give it as a mapping") from None
        else:
            tasks.append(_record(Task, task, f"{where}: tasks[{i}]"))
    kwargs = {
        k: v for k, v in data.items() if k in ("title", "limit", "port", "parallel", "overview", "one_step_per_arm")
    }
    return build_plan(
        title=str(data.get("title") or Path(where).stem),
        models=[_record(Model, m, f"{where}: models[{i}]") for i, m in enumerate(data.get("models") or ())],
        arms=[
            _record(Arm, _with_defaults(a, data.get("arm_defaults") or {}), f"{where}: arms[{i}]")
            for i, a in enumerate(data.get("arms") or ())
        ],
        tasks=tasks,
        out=REPO / (data.get("out") or Path("reports") / Path(where).stem),  # relative: to the checkout
        client=_record(Client, data.get("client") or {}, f"{where}: client"),
        **{k: v for k, v in kwargs.items() if k != "title"},
        inputs=dict(data),
    )


def _with_defaults(arm: Any, defaults: Mapping[str, Any]) -> Any:
    if not isinstance(arm, Mapping):
        return arm  # _record names the problem
    merged = {**defaults, **arm}
    if "flags" in defaults and "flags" in arm:
        merged["flags"] = [*defaults["flags"], *arm["flags"]]
    if "env" in defaults and "env" in arm:
        merged["env"] = {**defaults["env"], **arm["env"]}
    return merged


def plan_from_file(path: Path, out: Path | None = None) -> Plan:
    """``--plan FILE``: a YAML (or JSON) plan; every error names the file and the key. ``out`` (``--out`` given on
    the command line) replaces the plan's own ``out``, and the saved plan records it."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read the plan: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: a plan is a mapping of {', '.join(sorted(_PLAN_KEYS))}")
    return plan_from_mapping({**data, "out": str(out)} if out is not None else data, str(path))
