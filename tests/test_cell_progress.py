"""The progress of a long matrix (``harness/cell_progress.py``): a line per finished cell as it lands, its ETA from the
mean so far, a heartbeat while nothing lands, plain lines off a terminal. No engine, no sleeping past a second."""

from __future__ import annotations

import io
import threading
import time

from harness.cell_progress import CellLine, CellProgress, duration, eta_s


def test_eta_is_the_mean_time_per_landed_cell_times_the_cells_left() -> None:
    assert eta_s(30.0, 0, 10) is None  # nothing landed: no estimate
    assert eta_s(30.0, 3, 10) == 70.0  # 10 s a cell, 7 left
    assert eta_s(30.0, 10, 10) == 0.0
    assert duration(None) == "--" and duration(70.4) == "1m10s" and duration(3 * 3600 + 125) == "3h02m"


def test_a_finished_cell_line_says_what_its_verdict_its_seconds_and_what_is_left() -> None:
    line = CellLine(
        phase="faults",
        done=3,
        total=17,
        what="sglang-swa-x",
        verdict="killed: behavioural",
        seconds=9.24,
        elapsed_s=30.0,
    )
    assert line.text() == "[   30s] faults 3/17 sglang-swa-x: killed: behavioural, 9.2 s; ETA 2m20s"
    last = CellLine(phase="faults", done=17, total=17, what="f", verdict="survived", seconds=1.0, elapsed_s=99.0)
    assert last.text().endswith("survived, 1.0 s; done")


def test_cells_landing_from_threads_print_one_plain_line_each_off_a_terminal() -> None:
    out = io.StringIO()  # not a terminal: no bar, plain lines
    with CellProgress("faults", total=4, stream=out) as progress:
        assert not progress.live
        threads = [
            threading.Thread(target=lambda i=i: progress.done(f"f{i}", "killed: behavioural", 1.0)) for i in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    assert [line.split("] faults ")[1].split()[0] for line in lines] == ["1/4", "2/4", "3/4", "4/4"]  # in order
    assert lines[-1].endswith("; done") and all("ETA" in line for line in lines[:-1])


def test_a_quiet_stretch_prints_what_is_still_running_and_for_how_long() -> None:
    out = io.StringIO()
    with CellProgress("recording", total=2, stream=out, heartbeat_s=0.2) as progress:
        progress.say("recording under the clean build as it ships: started (2 suite runs)")
        progress.start("clean/pool")
        time.sleep(5.5)  # the heartbeat wakes every min(heartbeat, 5 s)
    text = out.getvalue()
    assert "recording 0/2, still running: clean/pool 0m0" in text and "ETA --" in text


def test_a_terminal_gets_a_bar_and_the_same_lines() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    with CellProgress("sglang-matrix", total=2, stream=out) as progress:
        assert progress.live
        progress.done("0.5.22", "pool: passed", 3.0)
        progress.done("0.5.23", "pool: passed", 3.0)
    assert "sglang-matrix 1/2 0.5.22: pool: passed, 3.0 s" in out.getvalue()
