"""The eval history: records round-trip, replace by run id, and the trend finds since when a verdict holds."""

from __future__ import annotations

import json

from harness.evals.history import HistoryEntry, History, TaskSnapshot, load, record, trend
from harness.evals.results import Estimate


def _snapshot(task: str, verdict: str, on: float = 0.9) -> TaskSnapshot:
    return TaskSnapshot(
        task,
        verdict,
        True,
        100,
        "tape",
        "off",
        Estimate(on, on - 0.05, on + 0.04),
        Estimate(0.9, 0.85, 0.94),
        Estimate(on - 0.9, on - 0.93, on - 0.87),
        0.5,
        2,
        1,
        4,
    )


def _entry(i: int, *verdicts: str, fault: str | None = None) -> HistoryEntry:
    tasks = tuple(_snapshot(f"s{k}", v) for k, v in enumerate(verdicts) if v)
    overall = "RED" if "RED" in verdicts else "AMBER" if "AMBER" in verdicts else "GREEN"
    return HistoryEntry(
        f"run-{i}",
        f"2026-03-{i:02d}T00:00:00+00:00",
        overall,
        "why",
        "m",
        fault,
        "harness abc",
        tasks,
        {"run": {"id": f"run-{i}"}},
    )


def test_records_round_trip_and_a_run_id_is_recorded_once(tmp_path) -> None:
    path = tmp_path / "deep" / "history.jsonl"
    first = _entry(1, "GREEN", "AMBER")
    record(path, first)
    record(path, _entry(2, "GREEN"))
    again = HistoryEntry(**{**first.__dict__, "verdict": "RED", "reason": "judged again"})
    history = record(path, again)
    assert [e.run_id for e in history.entries] == ["run-1", "run-2"] and history.entries[0].reason == "judged again"
    assert load(path).entries == history.entries  # what is on disk is what was returned
    assert json.loads(path.read_text().splitlines()[0])["schema"] == 1


def test_since_is_found_beyond_the_shown_window() -> None:
    verdicts = ["GREEN", "RED"] + ["RED"] * 30  # changed at run 2, then 30 RED runs
    entries = tuple(_entry(i + 1, v) for i, v in enumerate(verdicts))
    t = trend(History(entries), entries[-1], limit=20)
    assert t.runs == 32 and len(t.overall) == 20 and t.overall[0].index == 13
    assert t.since is not None and t.since.index == 2 and t.since.changed_from == "GREEN"
    assert t.tasks[0].since is not None and t.tasks[0].since.index == 2
    assert not any(p.changed_from for p in t.tasks[0].points)  # no change inside the window itself
    assert t.overall[-1].current and not t.overall[0].current


def test_a_task_missing_from_a_run_is_a_gap_not_a_change() -> None:
    entries = (
        _entry(1, "GREEN", "GREEN"),
        _entry(2, "GREEN", ""),
        _entry(3, "GREEN", "GREEN"),
        _entry(4, "GREEN", "RED"),
    )
    t = trend(History(entries), entries[-1])
    s1 = t.tasks[1]
    assert [p.snapshot is None for p in s1.points] == [False, True, False, False]
    assert [p.changed_from for p in s1.points] == [None, None, None, "GREEN"] and s1.since.index == 4


def test_runs_of_other_series_are_counted_not_charted() -> None:
    entries = (_entry(1, "GREEN"), _entry(2, "RED", fault="pad-swa-loc-not-zeroed"), _entry(3, "GREEN"))
    t = trend(History(entries, unreadable=2), entries[-1])
    assert [p.entry.run_id for p in t.overall] == ["run-1", "run-3"] and t.since is None
    assert (t.other_series, t.unreadable) == (1, 2)
    assert "fault pad-swa-loc-not-zeroed" in entries[1].series and "fault none" in entries[0].series


def test_a_smoke_and_a_full_run_or_other_pool_settings_are_other_series() -> None:
    """It used to put a 500-item run and a 40-item run in one series and call the change a verdict change."""

    def entry(items: str, pool: str) -> HistoryEntry:
        arms = {
            side: {"graphs": side, "identity": {"flags": {"graphs": side, "flags": f"--max-total-tokens {pool}"}}}
            for side in ("on", "off")
        }
        return HistoryEntry(
            "r",
            "2026-03-01T00:00:00+00:00",
            "GREEN",
            "why",
            "m",
            None,
            "sglang 0.5.23",
            (),
            {"run": {"id": "r", "items": items}, "arms": arms},
        )

    full, smoke, small_pool = (
        entry("first 500 per task", "65536"),
        entry("first 40 per task", "65536"),
        entry("first 500 per task", "2048"),
    )
    assert full.series != smoke.series and full.series != small_pool.series
    assert entry("first 500 per task", "65536").series == full.series
    assert "N first 40 per task" in smoke.series  # shown where the trend names its series
