"""Live progress while lm-eval runs: per arm and suite, items done / total, tokens per second, ETA.

The counts come from each server's ``/health`` (requests served, tokens generated), because lm-eval
says nothing per task while it runs. lm-eval (0.4.13, checked against a recording server) sends the
suites' requests in the order of ``--tasks``, one suite after the other (they differ in generation
settings, and it groups by those), so the items a server has served are attributed to the suites in
that order. A response cache reused with ``--resume`` is not served again, so then the counts lag.

On a terminal this is a ``rich`` live display; when stderr is not a terminal (CI logs) it is one
plain line per interval instead of a redrawn bar.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn
from rich.progress import Progress as RichProgress

from harness.engines.identity import get_json

Fetch = Callable[[str], dict]


def health(base_url: str) -> dict:
    """The server's ``/health`` JSON, or ``{}`` when it cannot be read (progress must never fail a run)."""
    data = get_json(base_url, "/health", timeout=2)
    return data if isinstance(data, dict) else {}


def _counters(stats: Mapping) -> tuple[int, int]:
    return int(stats.get("requests_served") or 0), int(stats.get("generated_tokens") or 0)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "--"
    seconds = int(round(seconds))
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


@dataclass(frozen=True)
class Row:
    """One line of the display: an arm (``suite`` None) or one of its suites."""

    arm: str
    suite: str | None
    done: int
    total: int
    tokens_per_s: float | None
    eta_s: float | None  # until this row is done, at the arm's rate so far; None before any item

    @property
    def name(self) -> str:
        return f"graphs {self.arm}" + (f" · {self.suite}" if self.suite else "")


@dataclass
class ArmProgress:
    """One server's counters since ``watch``; a reused external server's earlier work is subtracted."""

    label: str
    base_url: str
    totals: dict[str, int]  # suite -> items, in the order lm-eval sends them; "" when not split
    started: float
    base_done: int = 0
    base_tokens: int = 0
    done: int = 0
    tokens: int = 0
    finished: bool = False

    def update(self, stats: Mapping) -> None:
        if stats:
            done, tokens = _counters(stats)
            self.done, self.tokens = max(0, done - self.base_done), max(0, tokens - self.base_tokens)

    def rows(self, now: float) -> list[Row]:
        """The arm's row, then one per suite, the served items filled into the suites in order."""
        elapsed = max(now - self.started, 1e-9)
        total = sum(self.totals.values())
        done = min(self.done, total)
        rate = done / elapsed if done else None
        tps = self.tokens / elapsed if self.tokens else None

        def eta(until: int) -> float | None:
            return 0.0 if done >= until else (until - done) / rate if rate else None

        rows = [Row(self.label, None, done, total, tps, eta(total))]
        if list(self.totals) != [""]:
            before = 0
            for suite, n in self.totals.items():
                rows.append(Row(self.label, suite, min(max(done - before, 0), n), n,
                                tps if before <= done < before + n else None, eta(before + n)))
                before += n
        return rows


def plain_line(rows: list[Row], elapsed: float) -> str:
    """One log line for every arm: ``[  35s] graphs on: 120/700 items, 85.2 tok/s, ETA 2m10s (gsm_style 120/500, ...)``."""
    parts = []
    for row in (r for r in rows if r.suite is None):
        text = f"graphs {row.arm}: {row.done}/{row.total} items"
        if row.tokens_per_s is not None:
            text += f", {row.tokens_per_s:.1f} tok/s"
        text += f", ETA {_duration(row.eta_s)}"
        suites = [f"{r.suite} {r.done}/{r.total}" for r in rows if r.arm == row.arm and r.suite]
        parts.append(text + (f" ({', '.join(suites)})" if suites else ""))
    return f"[{elapsed:6.0f}s] " + " | ".join(parts)


@dataclass
class Progress:
    """Polls the watched servers every ``interval_s`` and shows their progress on ``stream``.

    ``live`` defaults to whether ``stream`` is a terminal; ``interval_s`` to 1 s live and 30 s for
    plain lines. ``fetch`` reads a server's ``/health`` (replaced in tests).
    """

    interval_s: float | None = None
    stream: TextIO | None = None
    live: bool | None = None
    fetch: Fetch = health
    arms: dict[str, ArmProgress] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stream = self.stream or sys.stderr
        if self.live is None:
            self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        if self.interval_s is None:
            self.interval_s = 1.0 if self.live else 30.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="eval-progress", daemon=True)
        self._start = time.perf_counter()
        self._rich: RichProgress | None = None
        self._tasks: dict[tuple[str, str | None], TaskID] = {}

    def watch(self, label: str, base_url: str, total: int | Mapping[str, int]) -> None:
        """Start showing an arm; ``total`` per suite (in the order lm-eval sends them) or as one number."""
        totals = dict(total) if isinstance(total, Mapping) else {"": int(total)}
        base_done, base_tokens = _counters(self.fetch(base_url).get("stats", {}))
        arm = ArmProgress(label, base_url, totals, time.perf_counter(), base_done, base_tokens)
        with self._lock:
            self.arms[label] = arm
        self._show(arm)

    def unwatch(self, label: str) -> None:
        """The arm is done (or failed): one last reading, shown as final, then no more polling of it."""
        with self._lock:
            arm = self.arms.get(label)
        if arm is None or arm.finished:
            return
        arm.update(self.fetch(arm.base_url).get("stats", {}))
        arm.finished = True
        self._show(arm)
        if not self.live:
            self._print([arm])

    def snapshot(self) -> list[Row]:
        now = time.perf_counter()
        with self._lock:
            return [row for arm in self.arms.values() for row in arm.rows(now)]

    def __enter__(self) -> Progress:
        if self.live:
            self._rich = RichProgress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[eta]}"),
                console=Console(file=self.stream), refresh_per_second=2, transient=False,
            )  # fmt: skip
            self._rich.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._rich is not None:
            self._rich.stop()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with self._lock:
                active = [arm for arm in self.arms.values() if not arm.finished]
            for arm in active:
                arm.update(self.fetch(arm.base_url).get("stats", {}))
                self._show(arm)
            if active and not self.live:
                self._print(active)

    def _print(self, arms: list[ArmProgress]) -> None:
        now = time.perf_counter()
        rows = [row for arm in arms for row in arm.rows(now)]
        print(plain_line(rows, now - self._start), file=self.stream, flush=True)

    def _show(self, arm: ArmProgress) -> None:
        """Mirror the arm's rows into the rich display (no-op for plain lines)."""
        if self._rich is None:
            return
        for row in arm.rows(time.perf_counter()):
            key = (row.arm, row.suite)
            fields = {"rate": f"{row.tokens_per_s:.1f} tok/s" if row.tokens_per_s else "",
                      "eta": "done" if row.done >= row.total else "stopped" if arm.finished else f"ETA {_duration(row.eta_s)}"}
            if key not in self._tasks:
                self._tasks[key] = self._rich.add_task(("  " if row.suite else "") + row.name, total=row.total, **fields)
            self._rich.update(self._tasks[key], completed=row.done, **fields)
