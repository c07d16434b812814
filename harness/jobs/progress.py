"""Live progress while lm-eval runs: per arm and task, items done / total, tokens per second, ETA.

The counts come from each server's own counters (requests finished, tokens generated: the engine says
where, ``harness.servers.counters``), because lm-eval says nothing per task while it runs. lm-eval (0.4.13, checked against a recording server) sends the
tasks' requests in the order of ``--tasks``, one task after the other (they differ in generation
settings, and it groups by those), so the items a server has served are attributed to the tasks in
that order. A response cache reused with ``--resume`` is not served again, so then the counts lag.

Before that, while a server starts (SGLang's CPU graph runner compiles for minutes), its row says how
long it has been starting and the last line of its log; the start-up time stays on the row.

On a terminal this is a ``rich`` live display; when stderr is not a terminal (CI logs) it is one
plain line per interval instead of a redrawn bar.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn
from rich.progress import Progress as RichProgress

from harness.servers.counters import Counters, ReadCounters, health_counters
from harness.servers.identity import get_json


def health(base_url: str) -> dict:
    """The server's ``/health`` JSON, or ``{}`` when it cannot be read (progress must never fail a run)."""
    data = get_json(base_url, "/health", timeout=2)
    return data if isinstance(data, dict) else {}


def last_line(log_path: Path | None, width: int = 70) -> str:
    """The log's last non-empty line that is not an HTTP access line (readiness probes fill the log with those) or
    the source line Python prints under a warning, shortened: what a starting server is doing."""
    if log_path is None:
        return ""
    try:
        with open(log_path, "rb") as log:
            log.seek(0, 2)
            log.seek(max(0, log.tell() - 4096))
            lines = [
                ln.strip()
                for ln in log.read().decode(errors="replace").splitlines()
                if ln.strip() and 'HTTP/1.1"' not in ln and not ln.strip().startswith("warnings.warn(")
            ]
    except OSError:
        return ""
    line = lines[-1] if lines else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "--"
    seconds = int(round(seconds))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
    )


@dataclass(frozen=True)
class Row:
    """One line of the display: an arm (``task`` None) or one of its tasks."""

    arm: str
    task: str | None
    done: int
    total: int
    tokens_per_s: float | None
    eta_s: float | None  # until this row is done, at the arm's rate so far; None before any item
    startup_s: float | None = None  # the arm's row: how long its server took to start (this job started it)

    @property
    def name(self) -> str:
        return f"graphs {self.arm}" + (f" · {self.task}" if self.task else "")


@dataclass
class Startup:
    """A server on its way up: since when, and its log (whose last line says what it is doing)."""

    label: str
    started: float
    log_path: Path | None = None

    def line(self, now: float) -> str:
        text = f"graphs {self.label}: starting server, {_duration(now - self.started)}"
        tail = last_line(self.log_path)
        return text + (f" ({tail})" if tail else "")


@dataclass
class ArmProgress:
    """One server's counters since ``watch``; a reused external server's earlier work is subtracted."""

    label: str
    base_url: str
    totals: dict[str, int]  # task -> items, in the order lm-eval sends them; "" when not split
    started: float
    base: Counters = Counters(0, 0)
    read: ReadCounters = health_counters
    startup_s: float | None = None  # how long its server took to answer, when this job started it
    done: int = 0
    tokens: int = 0
    finished: bool = False

    def update(self, counters: Counters | None) -> None:
        if counters is not None:
            self.done = max(0, counters.requests - self.base.requests)
            self.tokens = max(0, counters.tokens - self.base.tokens)

    def poll(self) -> None:
        self.update(self.read(self.base_url))

    def rows(self, now: float) -> list[Row]:
        """The arm's row, then one per task, the served items filled into the tasks in order."""
        elapsed = max(now - self.started, 1e-9)
        total = sum(self.totals.values())
        done = min(self.done, total)
        rate = done / elapsed if done else None
        tps = self.tokens / elapsed if self.tokens else None

        def eta(until: int) -> float | None:
            return 0.0 if done >= until else (until - done) / rate if rate else None

        rows = [
            Row(
                arm=self.label,
                task=None,
                done=done,
                total=total,
                tokens_per_s=tps,
                eta_s=eta(total),
                startup_s=self.startup_s,
            )
        ]
        if list(self.totals) != [""]:
            before = 0
            for task, n in self.totals.items():
                rows.append(
                    Row(
                        arm=self.label,
                        task=task,
                        done=min(max(done - before, 0), n),
                        total=n,
                        tokens_per_s=tps if before <= done < before + n else None,
                        eta_s=eta(before + n),
                    )
                )
                before += n
        return rows


def plain_line(rows: list[Row], elapsed: float, startups: list[str] = ()) -> str:
    """One log line for every arm: ``[  35s] graphs on: 120/700 items, 85.2 tok/s, ETA 2m10s (gsm_style 120/500, ...)``."""
    parts = []
    for row in (r for r in rows if r.task is None):
        text = f"graphs {row.arm}: {row.done}/{row.total} items"
        if row.tokens_per_s is not None:
            text += f", {row.tokens_per_s:.1f} tok/s"
        text += f", ETA {_duration(row.eta_s)}"
        if row.startup_s is not None:
            text += f", server started in {_duration(row.startup_s)}"
        tasks = [f"{r.task} {r.done}/{r.total}" for r in rows if r.arm == row.arm and r.task]
        parts.append(text + (f" ({', '.join(tasks)})" if tasks else ""))
    return f"[{elapsed:6.0f}s] " + " | ".join([*startups, *parts])


@dataclass
class Progress:
    """Polls the watched servers every ``interval_s`` and shows their progress on ``stream``.

    ``live`` defaults to whether ``stream`` is a terminal; ``interval_s`` to 1 s live and 30 s for
    plain lines.
    """

    interval_s: float | None = None
    stream: TextIO | None = None
    live: bool | None = None
    arms: dict[str, ArmProgress] = field(default_factory=dict)
    startups: dict[str, Startup] = field(default_factory=dict)
    startup_s: dict[str, float] = field(default_factory=dict)  # label -> seconds its server took to start

    def __post_init__(self) -> None:
        self.stream = self.stream or sys.stderr
        if self.live is None:
            self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        if self.interval_s is None:
            self.interval_s = 1.0 if self.live else 30.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # A tick prints what it read under this lock, and a start or a finish changes state under it: no tick's
        # stale reading lands after a server's ready line or an arm's final line.
        self._order = threading.RLock()
        self._thread = threading.Thread(target=self._loop, name="eval-progress", daemon=True)
        self._start = time.perf_counter()
        self._rich: RichProgress | None = None
        self._tasks: dict[tuple[str, str | None], TaskID] = {}

    def starting(self, label: str, log_path: Path | None = None) -> None:
        """A server for ``label`` is being started: show since when, and the last line of its log."""
        with self._lock:
            self.startups[label] = Startup(label, time.perf_counter(), log_path)
        self._show_startup(self.startups[label])

    def started(self, label: str, ok: bool = True) -> float | None:
        """The server answers (or failed to, ``ok`` False): the row keeps its start-up time; returns it."""
        with self._order, self._lock:
            startup = self.startups.pop(label, None)
        if startup is None:
            return None
        seconds = time.perf_counter() - startup.started
        if ok:
            self.startup_s[label] = seconds
        if self._rich is not None and (key := (label, "starting")) in self._tasks:
            self._rich.remove_task(self._tasks.pop(key))
        word = "server ready after" if ok else "server failed after"
        self._say(f"graphs {label}: {word} {_duration(seconds)}")
        return seconds

    def watch(
        self, label: str, base_url: str, total: int | Mapping[str, int], read: ReadCounters = health_counters
    ) -> None:
        """Start showing an arm; ``total`` per task (in the order lm-eval sends them) or as one number; ``read``
        gets the server's counters (its engine's reader)."""
        totals = dict(total) if isinstance(total, Mapping) else {"": int(total)}
        arm = ArmProgress(
            label=label,
            base_url=base_url,
            totals=totals,
            started=time.perf_counter(),
            base=read(base_url) or Counters(0, 0),
            read=read,
            startup_s=self.startup_s.get(label),
        )
        with self._lock:
            self.arms[label] = arm
        self._show(arm)

    def unwatch(self, label: str) -> None:
        """The arm is done (or failed): one last reading, shown as final, then no more polling of it."""
        with self._order:
            with self._lock:
                arm = self.arms.get(label)
            if arm is None or arm.finished:
                return
            arm.poll()
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
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TextColumn("{task.fields[eta]}"),
                console=Console(file=self.stream),
                refresh_per_second=2,
                transient=False,
            )
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
            with self._order:
                self._tick()

    def _tick(self) -> None:
        with self._lock:
            active = [arm for arm in self.arms.values() if not arm.finished]
            startups = list(self.startups.values())
        for arm in active:
            arm.poll()
            self._show(arm)
        for startup in startups:
            self._show_startup(startup)
        if (active or startups) and not self.live:
            self._print(active, startups)

    def _print(self, arms: list[ArmProgress], startups: list[Startup] = ()) -> None:
        now = time.perf_counter()
        rows = [row for arm in arms for row in arm.rows(now)]
        print(plain_line(rows, now - self._start, [s.line(now) for s in startups]), file=self.stream, flush=True)

    def _say(self, text: str) -> None:
        if self._rich is not None:
            self._rich.console.print(text)
        else:
            print(text, file=self.stream, flush=True)

    def _show_startup(self, startup: Startup) -> None:
        if self._rich is None:
            return
        key, text = (startup.label, "starting"), startup.line(time.perf_counter())
        if key not in self._tasks:
            self._tasks[key] = self._rich.add_task(text, total=None, rate="", eta="")
        self._rich.update(self._tasks[key], description=text)

    def _show(self, arm: ArmProgress) -> None:
        """Mirror the arm's rows into the rich display (no-op for plain lines)."""
        if self._rich is None:
            return
        for row in arm.rows(time.perf_counter()):
            key = (row.arm, row.task)
            fields = {
                "rate": f"{row.tokens_per_s:.1f} tok/s" if row.tokens_per_s else "",
                "eta": "done"
                if row.done >= row.total
                else "stopped"
                if arm.finished
                else f"ETA {_duration(row.eta_s)}",
            }
            if key not in self._tasks:
                self._tasks[key] = self._rich.add_task(("  " if row.task else "") + row.name, total=row.total, **fields)
            self._rich.update(self._tasks[key], completed=row.done, **fields)
