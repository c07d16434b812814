"""The live progress of an eval: per arm and suite counts, rates and ETAs; plain lines off a terminal."""

from __future__ import annotations

import io
import time

from harness.jobs.progress import ArmProgress, Progress, plain_line


class FakeServers:
    """``/health`` of servers whose counters the test moves by hand."""

    def __init__(self) -> None:
        self.stats: dict[str, dict[str, int]] = {}

    def __call__(self, base_url: str) -> dict:
        return {"stats": dict(self.stats.get(base_url, {}))}


def test_served_items_fill_the_suites_in_lm_evals_order() -> None:
    arm = ArmProgress("on", "u", {"gsm_style": 5, "aime_style": 3}, started=0.0)
    arm.update({"requests_served": 6, "generated_tokens": 300})
    whole, gsm, aime = arm.rows(now=10.0)
    assert (whole.done, whole.total, whole.tokens_per_s) == (6, 8, 30.0)
    assert whole.eta_s == (8 - 6) / 0.6  # at 0.6 items/s so far
    assert (gsm.done, gsm.total, gsm.eta_s, gsm.tokens_per_s) == (5, 5, 0.0, None)
    assert (aime.done, aime.total, aime.tokens_per_s) == (1, 3, 30.0) and aime.eta_s == whole.eta_s


def test_a_reused_servers_earlier_work_is_not_counted() -> None:
    servers = FakeServers()
    servers.stats["u"] = {"requests_served": 100, "generated_tokens": 5000}
    progress = Progress(stream=io.StringIO(), fetch=servers)
    progress.watch("off", "u", 10)
    servers.stats["u"] = {"requests_served": 104, "generated_tokens": 5200}
    progress.arms["off"].update(servers("u")["stats"])
    (row,) = progress.snapshot()  # one number: no per-suite rows
    assert (row.suite, row.done, row.total) == (None, 4, 10) and row.eta_s is not None and row.eta_s > 0


def test_plain_lines_when_the_stream_is_not_a_terminal() -> None:
    stream, servers = io.StringIO(), FakeServers()
    with Progress(interval_s=0.02, stream=stream, fetch=servers) as progress:
        assert progress.live is False
        progress.watch("on", "http://on", {"gsm_style": 5, "aime_style": 3})
        servers.stats["http://on"] = {"requests_served": 6, "generated_tokens": 240}
        deadline = time.monotonic() + 5
        while "6/8" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        servers.stats["http://on"] = {"requests_served": 8, "generated_tokens": 320}
        progress.unwatch("on")
    lines = stream.getvalue().splitlines()
    assert any("graphs on: 6/8 items" in line and "(gsm_style 5/5, aime_style 1/3)" in line for line in lines)
    assert "tok/s" in lines[-1] and "ETA 0m00s" in lines[-1] and "8/8 items" in lines[-1]
    assert "\r" not in stream.getvalue() and "\x1b[" not in stream.getvalue()  # no redrawing in a log


def test_plain_default_interval_suits_a_log() -> None:
    assert Progress(stream=io.StringIO()).interval_s == 30.0
    assert Progress(stream=io.StringIO(), live=True).interval_s == 1.0


def test_live_display_shows_every_arm_and_suite() -> None:
    stream, servers = io.StringIO(), FakeServers()
    with Progress(interval_s=0.02, stream=stream, live=True, fetch=servers) as progress:
        progress.watch("on", "http://on", {"gsm_style": 4, "aime_style": 2})
        progress.watch("off", "http://off", {"gsm_style": 4, "aime_style": 2})
        servers.stats["http://on"] = {"requests_served": 6, "generated_tokens": 600}
        servers.stats["http://off"] = {"requests_served": 3, "generated_tokens": 90}
        progress.unwatch("on")
        progress.unwatch("off")
    text = stream.getvalue()
    for name in ("graphs on", "graphs on · gsm_style", "graphs on · aime_style", "graphs off · aime_style"):
        assert name in text
    assert "6/6" in text and "3/6" in text and "stopped" in text  # off ended early: not "done"


def test_plain_line_format() -> None:
    arm = ArmProgress("on", "u", {"gsm_style": 2}, started=0.0)
    arm.update({"requests_served": 1, "generated_tokens": 50})
    line = plain_line(arm.rows(now=5.0), elapsed=5.0)
    assert line == "[     5s] graphs on: 1/2 items, 10.0 tok/s, ETA 0m05s (gsm_style 1/2)"
