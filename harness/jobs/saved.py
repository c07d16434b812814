"""A job's plan read back from the ``plan.json`` it saved beside its runs (``swa-harness report``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from harness.jobs.cpu import PLAN_FIELDS, EvalConfig, cpu_plan
from harness.jobs.nightly import build_nightly_plan
from harness.jobs.plan import Plan
from harness.jobs.plan_file import plan_from_mapping


def plan_from_inputs(inputs: Mapping[str, Any]) -> Plan:
    """The plan built again from what its builder was given (the ``inputs`` of plan.json)."""
    if "eval" in inputs:
        fields = {k: v for k, v in inputs["eval"].items() if k in PLAN_FIELDS}
        fields.setdefault("cache_off", False)  # saved before the job had a cache-off arm: graphs on vs off alone
        return cpu_plan(EvalConfig(**{**fields, "model": Path(fields["model"]), "out": Path(fields["out"])}))
    if "nightly" in inputs:
        return build_nightly_plan(**{**inputs["nightly"], "out": Path(inputs["nightly"]["out"])})
    return plan_from_mapping(inputs)
