"""Progress of a long matrix (kill, mutation, release): one line per finished cell, as it finishes, and what is left.

A matrix's cells (a fault, a mutant, a release, a clean suite run) take seconds to minutes each and run in parallel,
so a user needs to see each one land and how long the rest will take: every finished cell prints

    [  35s] faults 3/17 sglang-swa-free-leaks: killed: behavioural, 9.2 s; ETA 1m50s

The ETA is the mean so far, per cell landed, times the cells left: (seconds since the phase started / cells done) x
(total - done). With parallel runs that mean is the wall between landings, not one cell's own time, so it already
counts the parallelism; before the first cell lands there is no ETA (``--``).

Nothing runs silent: while cells are in flight and none has landed for ``heartbeat_s`` (30 s by default), a line
says what is still running and for how long. On a terminal a ``rich`` bar sits under the lines; elsewhere (CI logs,
pipes) the lines are plain. Progress never fails a run: it prints, and that is all.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn
from rich.progress import Progress as RichProgress

HEARTBEAT_S = 30.0


def duration(seconds: float | None) -> str:
    """``1m05s``, ``2h03m``; ``--`` for no estimate."""
    if seconds is None:
        return "--"
    whole = int(round(max(seconds, 0.0)))
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m" if whole >= 3600 else f"{whole // 60}m{whole % 60:02d}s"


def eta_s(elapsed_s: float, done: int, total: int) -> float | None:
    """Seconds left at the mean so far: elapsed / done per cell, times the cells left (None before any cell)."""
    if done <= 0:
        return None
    return max(total - done, 0) * elapsed_s / done


@dataclass(frozen=True)
class CellLine:
    """One finished cell as its line shows it."""

    phase: str  # "faults", "recording", "sglang-matrix", ...
    done: int
    total: int
    what: str  # the cell: a fault id, "clean/pool", a release
    verdict: str
    seconds: float  # the cell's own time
    elapsed_s: float  # since the phase started

    def text(self) -> str:
        left = eta_s(self.elapsed_s, self.done, self.total)
        return (
            f"[{self.elapsed_s:5.0f}s] {self.phase} {self.done}/{self.total} {self.what}: {self.verdict}, "
            f"{self.seconds:.1f} s; " + ("done" if self.done >= self.total else f"ETA {duration(left)}")
        )


@dataclass
class CellProgress:
    """One phase of a matrix: ``total`` cells, each reported with ``done`` as it lands (from any thread).

    ``live`` defaults to whether ``stream`` is a terminal (then a ``rich`` bar under the lines)."""

    phase: str
    total: int
    stream: TextIO | None = None
    live: bool | None = None
    heartbeat_s: float = HEARTBEAT_S
    running: dict[str, float] = field(default_factory=dict)  # cell -> when it started
    finished: int = 0

    def __post_init__(self) -> None:
        self.stream = self.stream or sys.stderr
        if self.live is None:
            self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._start = time.perf_counter()
        self._last = self._start  # the last line printed: a heartbeat comes only after heartbeat_s of silence
        self._thread = threading.Thread(target=self._beat, name=f"{self.phase}-progress", daemon=True)
        self._rich: RichProgress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> CellProgress:
        if self.live:
            self._rich = RichProgress(
                TextColumn(f"{self.phase}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[eta]}"),
                console=Console(file=self.stream),
                refresh_per_second=2,
                transient=True,
            )
            self._rich.start()
            self._task = self._rich.add_task(self.phase, total=self.total, eta="")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._rich is not None:
            self._rich.stop()

    def say(self, text: str) -> None:
        """A line of its own (a phase starting, a note), above the bar on a terminal."""
        with self._lock:
            self._emit(text)

    def _emit(self, text: str) -> None:
        """Print under the lock held: lines land in the order their counts say."""
        self._last = time.perf_counter()
        if self._rich is not None:
            self._rich.console.print(text, highlight=False, markup=False)
        else:
            print(text, file=self.stream, flush=True)

    def start(self, what: str) -> None:
        """A cell began: the heartbeat names it while it runs."""
        with self._lock:
            self.running[what] = time.perf_counter()

    def done(self, what: str, verdict: str, seconds: float) -> CellLine:
        """A cell landed: its line, with the ETA of the rest."""
        with self._lock:
            self.running.pop(what, None)
            self.finished += 1
            line = CellLine(
                phase=self.phase,
                done=self.finished,
                total=self.total,
                what=what,
                verdict=verdict,
                seconds=seconds,
                elapsed_s=time.perf_counter() - self._start,
            )
            if self._rich is not None and self._task is not None:
                left = eta_s(line.elapsed_s, line.done, line.total)
                self._rich.update(self._task, completed=line.done, eta=f"ETA {duration(left)}")
            self._emit(line.text())
        return line

    def heartbeat_line(self, now: float) -> str:
        """What is still running and for how long: the line printed after ``heartbeat_s`` of silence."""
        with self._lock:
            running = sorted(self.running.items(), key=lambda kv: kv[1])
            done = self.finished
        cells = ", ".join(f"{what} {duration(now - since)}" for what, since in running) or "nothing started yet"
        left = eta_s(now - self._start, done, self.total)
        return (
            f"[{now - self._start:5.0f}s] {self.phase} {done}/{self.total}, still running: {cells}; "
            f"ETA {duration(left)}"
        )

    def _beat(self) -> None:
        while not self._stop.wait(min(self.heartbeat_s, 5.0)):
            now = time.perf_counter()
            with self._lock:
                quiet = now - self._last >= self.heartbeat_s
            if quiet and self.finished < self.total:
                self.say(self.heartbeat_line(now))
