"""The live progress of an eval: per arm and task counts, rates and ETAs; plain lines off a terminal."""

from __future__ import annotations

import io
import re
import time

from pathlib import Path

from harness.servers.counters import Counters
from harness.jobs.progress import ArmProgress, Progress, plain_line


class FakeServers:
    """Counters of servers that the test moves by hand (an engine's reader)."""

    def __init__(self) -> None:
        self.stats: dict[str, Counters] = {}

    def __call__(self, base_url: str) -> Counters | None:
        return self.stats.get(base_url)


def test_served_items_fill_the_tasks_in_lm_evals_order() -> None:
    arm = ArmProgress("on", "u", {"gsm_style": 5, "aime_style": 3}, started=0.0)
    arm.update(Counters(6, 300))
    whole, gsm, aime = arm.rows(now=10.0)
    assert (whole.done, whole.total, whole.tokens_per_s) == (6, 8, 30.0)
    assert whole.eta_s == (8 - 6) / 0.6  # at 0.6 items/s so far
    assert (gsm.done, gsm.total, gsm.eta_s, gsm.tokens_per_s) == (5, 5, 0.0, None)
    assert (aime.done, aime.total, aime.tokens_per_s) == (1, 3, 30.0) and aime.eta_s == whole.eta_s


def test_a_reused_servers_earlier_work_is_not_counted() -> None:
    servers = FakeServers()
    servers.stats["u"] = Counters(100, 5000)
    progress = Progress(stream=io.StringIO())
    progress.watch("off", "u", 10, servers)
    servers.stats["u"] = Counters(104, 5200)
    progress.arms["off"].poll()
    (row,) = progress.snapshot()  # one number: no per-task rows
    assert (row.task, row.done, row.total) == (None, 4, 10) and row.eta_s is not None and row.eta_s > 0


def test_plain_lines_when_the_stream_is_not_a_terminal() -> None:
    stream, servers = io.StringIO(), FakeServers()
    with Progress(interval_s=0.02, stream=stream) as progress:
        assert progress.live is False
        progress.watch("on", "http://on", {"gsm_style": 5, "aime_style": 3}, servers)
        servers.stats["http://on"] = Counters(6, 240)
        deadline = time.monotonic() + 5
        while "6/8" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        servers.stats["http://on"] = Counters(8, 320)
        progress.unwatch("on")
    lines = stream.getvalue().splitlines()
    assert any("graphs on: 6/8 items" in line and "(gsm_style 5/5, aime_style 1/3)" in line for line in lines)
    assert "tok/s" in lines[-1] and "ETA 0m00s" in lines[-1] and "8/8 items" in lines[-1]
    assert "\r" not in stream.getvalue() and "\x1b[" not in stream.getvalue()  # no redrawing in a log


def test_plain_default_interval_suits_a_log() -> None:
    assert Progress(stream=io.StringIO()).interval_s == 30.0
    assert Progress(stream=io.StringIO(), live=True).interval_s == 1.0


def test_live_display_shows_every_arm_and_task() -> None:
    stream, servers = io.StringIO(), FakeServers()
    with Progress(interval_s=0.02, stream=stream, live=True) as progress:
        progress.watch("on", "http://on", {"gsm_style": 4, "aime_style": 2}, servers)
        progress.watch("off", "http://off", {"gsm_style": 4, "aime_style": 2}, servers)
        servers.stats["http://on"] = Counters(6, 600)
        servers.stats["http://off"] = Counters(3, 90)
        progress.unwatch("on")
        progress.unwatch("off")
    text = stream.getvalue()
    for name in ("graphs on", "graphs on · gsm_style", "graphs on · aime_style", "graphs off · aime_style"):
        assert name in text
    assert "6/6" in text and "3/6" in text and "stopped" in text  # off ended early: not "done"


def test_plain_line_format() -> None:
    arm = ArmProgress("on", "u", {"gsm_style": 2}, started=0.0)
    arm.update(Counters(1, 50))
    line = plain_line(arm.rows(now=5.0), elapsed=5.0)
    assert line == "[     5s] graphs on: 1/2 items, 10.0 tok/s, ETA 0m05s (gsm_style 1/2)"


def test_a_starting_server_shows_its_time_and_last_log_line_then_its_start_up_time(tmp_path: Path) -> None:
    stream, servers, log = io.StringIO(), FakeServers(), tmp_path / "server.log"
    log.write_text(
        'loading weights\nCompiling decode graph bs=2 ...\nINFO: 127.0.0.1:4 - "GET /health HTTP/1.1" 503\n'
        '  warnings.warn("Only CUDA supports AWQ")\n'
    )
    with Progress(interval_s=0.02, stream=stream) as progress:
        progress.starting("on", log)
        deadline = time.monotonic() + 5
        while "starting server" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        progress.started("on")
        progress.watch("on", "http://on", 4, servers)
        servers.stats["http://on"] = Counters(4, 40)
        progress.unwatch("on")
    text = stream.getvalue()
    assert re.search(r"graphs on: starting server, \dm\d\ds \(Compiling decode graph bs=2 \.\.\.\)", text)
    assert re.search(r"graphs on: server ready after \dm\d\ds", text)
    assert "4/4 items" in text.splitlines()[-1] and "server started in " in text.splitlines()[-1]


def test_a_server_that_fails_to_start_leaves_no_row_behind() -> None:
    stream = io.StringIO()
    with Progress(interval_s=60, stream=stream) as progress:
        progress.starting("off")
        assert progress.started("off", ok=False) is not None
        assert progress.startups == {} and progress.startup_s == {}
    assert "graphs off: server failed after" in stream.getvalue()
