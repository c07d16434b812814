"""One eval's settings as typed, immutable data: parsed once by the CLI, then passed down as is."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from harness.evals.compare import Thresholds
from harness.evals.paths import DEFAULT_KILL_MATRIX, DEFAULT_MODEL, DEFAULT_OUT
from harness.evals.suites import SUITES, SuiteSpec


@dataclass(frozen=True)
class ModeSpec:
    """One side of the comparison: the server that answers with graphs on, or the one with graphs off."""

    label: str  # "on" | "off"
    graphs: str  # graph mode of the launched server
    base_url: str | None = None  # an external server instead of launching one
    fault: str | None = None  # catalog fault injected into this server only


def _default_limits() -> dict[str, int]:
    return {name: spec.default_limit for name, spec in SUITES.items()}


@dataclass(frozen=True)
class EvalConfig:
    """Everything ``swa-harness eval`` was asked to do; the defaults are the CLI's defaults."""

    model: Path = DEFAULT_MODEL
    limits: Mapping[str, int] = field(default_factory=_default_limits)  # suite name -> items, in run order
    graphs_on: str = "auto"
    fault: str | None = None
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
    server_timeout: float = 600
    lm_eval_timeout: float = 3600
    thresholds: Thresholds = field(default_factory=Thresholds)
    argv: tuple[str, ...] = ()  # the command line, recorded in the provenance

    @property
    def history_file(self) -> Path | None:
        """Where this eval is recorded and its trend read from (the report's "since when")."""
        if not self.keep_history:
            return None
        return Path(self.history) if self.history else Path(self.out).parent / "history.jsonl"

    @property
    def suites(self) -> list[SuiteSpec]:
        return [SUITES[name] for name in self.limits]

    @property
    def model_name(self) -> str:
        return Path(self.model).name

    @property
    def modes(self) -> list[ModeSpec]:
        return [ModeSpec("on", self.graphs_on, self.on_url, self.fault), ModeSpec("off", "off", self.off_url)]
