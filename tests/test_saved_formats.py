"""Saved runs and history lines written before the typed run record (issue 39) still read, and write back
byte for byte: ``tests/data`` holds a run (``runs/gsm_style.json``, its items cut to three) and a history line
as the code of that time wrote them in a real ``swa-harness eval``."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from harness.evals.history import HistoryEntry, load
from harness.evals.results import RunRecord, RunResult

DATA = Path(__file__).resolve().parent / "data"
WEIGHTS = "sha256:ee952fbfa960e64641f3c1a034a01c63082ae8351a141431905f508bdfe191fb"


def _as_saved(run: RunResult) -> str:
    """The text ``RunResult.save`` writes."""
    return json.dumps(run.to_dict(), indent=1, ensure_ascii=False) + "\n"


def test_a_run_saved_before_the_record_reads_as_a_typed_record(tmp_path: Path) -> None:
    text = (DATA / "run_saved_before_issue39.json").read_text(encoding="utf-8")
    run = RunResult.load(DATA / "run_saved_before_issue39.json")
    assert (run.task, run.graphs, run.model, run.complete, len(run.items)) == (
        "gsm_style",
        "tape",
        "gemma2-tiny-swa",
        True,
        3,
    )
    record = run.record
    assert (record.arm, record.side, record.served_by, record.graphs, record.fault, record.base_url) == (
        "on",
        None,
        "harness",
        "tape",
        None,
        None,
    )
    assert record.start_s == 98.38 and record.identity is not None
    assert (record.identity.engine, record.identity.weights, record.identity.flags["graphs"]) == (
        "harness",
        WEIGHTS,
        "tape",
    )
    assert record.identity.raw["build"]["weights"] == WEIGHTS  # what /health said, kept for the resume cache
    assert record.forward_paths == {"extend-graph": 62, "decode-graph": 2022}
    assert _as_saved(run) == text  # the same keys in the same order: a re-save changes nothing
    assert run.save(tmp_path / "again.json").read_text(encoding="utf-8") == text


def test_runs_the_old_runner_wrote_without_a_server_round_trip() -> None:
    """A server that never started (no start-up time, identity or counters) and a saved run found missing."""
    failed = {
        "suite": "aime_style",
        "graphs": "auto",
        "model": "gemma2-tiny-swa",
        "complete": False,
        "error": "server (on) exited with code 1 before it was ready; see out/server.log",
        "items": [],
        "wall_s": 1.5,
        "meta": {
            "arm": "on",
            "mode": "on",
            "served by": "harness",
            "graphs": "auto",
            "fault": "pad-swa-loc-not-zeroed",
            "base_url": None,
        },
    }
    missing = {
        "suite": "gsm_style",
        "graphs": "off",
        "model": "m",
        "complete": False,
        "error": "no saved run at out/m/off/runs/gsm_style.json",
        "items": [],
        "wall_s": 0.0,
        "meta": {"arm": "off", "mode": "off"},
    }
    for saved in (failed, missing):
        assert RunResult.from_dict(saved).to_dict() == saved
    assert RunResult.from_dict(failed).record.fault == "pad-swa-loc-not-zeroed"
    assert RunResult.from_dict(missing).record == RunRecord("off")


def test_a_judged_run_is_saved_with_its_side_as_mode() -> None:
    """What the history's run-id digest and the report's run table see: ``mode`` is on/off once judged."""
    run = RunResult.load(DATA / "run_saved_before_issue39.json")
    judged = replace(run, record=replace(run.record, arm="lazy-capture", side="on"))
    assert judged.to_dict()["meta"]["mode"] == "on" and judged.to_dict()["meta"]["arm"] == "lazy-capture"


def test_a_history_line_written_before_reads_and_writes_back_the_same(tmp_path: Path) -> None:
    line = (DATA / "history_line_before_issue39.jsonl").read_text(encoding="utf-8").strip()
    entry = HistoryEntry.from_dict(json.loads(line))
    assert [t.task for t in entry.tasks] == ["gsm_style", "aime_style"] and entry.task("gsm_style").n == 500
    assert entry.provenance["arms"]["on"]["identity"]["weights"] == WEIGHTS
    assert json.dumps(entry.to_dict(), sort_keys=True, default=str, ensure_ascii=False) == line  # as record() writes
    (tmp_path / "history.jsonl").write_text(line + "\n", encoding="utf-8")
    assert load(tmp_path / "history.jsonl").entries == (entry,)
