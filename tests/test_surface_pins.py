"""The OpenAI surface's pins (``suites/servers/surface_pins.py``) without a server: the comparison names every detail
that changed, a check that came or went, and nothing when a run agrees; the command prints that diff field by field
and writes the pins only when told to. The harness server's row itself runs in ``nox -s tests``
(``suites/servers/test_openai_surface_servers.py[harness]``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suites.servers.surface import CHECKS, SurfaceResult
from suites.servers.surface_pins import PINS, Change, changes, held, main, observed, read_pins, write_report

BOUNDARY = {
    "status": "differs",
    "details": {"max_model_len": 1024, "at_limit_asked": 1010, "at_limit_generated": 1008, "one_over": "refused"},
}
ECHO = {"status": "honoured", "details": {"prompt_then_answer": True}}
PINNED = {"context boundary": BOUNDARY, "echo": ECHO}


def _with(check: dict, status: str | None = None, **details: object) -> dict:
    return {"status": status or check["status"], "details": {**check["details"], **details}}


def test_a_run_that_agrees_with_its_pins_changes_nothing() -> None:
    assert changes("sglang", PINNED, json.loads(json.dumps(PINNED))) == []
    assert held("sglang", PINNED, {"sglang": PINNED}) is None


def test_a_changed_detail_is_named_with_what_it_was_and_is() -> None:
    now = {**PINNED, "context boundary": _with(BOUNDARY, at_limit_generated=1009)}
    [change] = changes("sglang", PINNED, now)
    assert change == Change("sglang", "context boundary", "at_limit_generated", 1008, 1009)
    assert str(change) == "sglang: context boundary: at_limit_generated: 1008 -> 1009"


def test_a_status_comes_first_and_a_field_that_came_or_went_is_named() -> None:
    boundary = _with(BOUNDARY, "holds", one_over_http_status=400)
    del boundary["details"]["one_over"]
    found = [str(c) for c in changes("vllm", PINNED, {**PINNED, "context boundary": boundary})]
    assert found == [
        'vllm: context boundary: status: "differs" -> "holds"',
        'vllm: context boundary: one_over: "refused" -> (absent)',
        "vllm: context boundary: one_over_http_status: (absent) -> 400",
    ]


def test_a_check_that_came_or_went_is_named_with_its_status() -> None:
    now = {"context boundary": BOUNDARY, "logprobs": {"status": "holds", "details": {"tokens": 8}}}
    assert [str(c) for c in changes("harness", PINNED, now)] == [
        'harness: echo: "honoured" -> (absent)',
        'harness: logprobs: (absent) -> "holds"',
    ]
    assert [str(c) for c in changes("harness", {}, {"echo": ECHO})] == ['harness: echo: (absent) -> "honoured"']


def test_the_failure_is_one_line_naming_every_change_and_the_command_that_accepts_them() -> None:
    now = {"context boundary": _with(BOUNDARY, "holds", at_limit_generated=1010), "echo": _with(ECHO, "differs")}
    message = held("sglang", now, {"sglang": PINNED})
    assert message is not None and "\n" not in message
    assert message.startswith("sglang's OpenAI surface changed in 3 details: ")
    for part in (
        'sglang: context boundary: status: "differs" -> "holds"',
        "sglang: context boundary: at_limit_generated: 1008 -> 1010",
        'sglang: echo: status: "honoured" -> "differs"',
        "python -m suites.servers.surface_pins --update reports/openai-surface-sglang.json",
    ):
        assert part in message, part


def test_observed_details_read_back_from_json_compare_equal() -> None:
    """A result's details as a check builds them (tuples of ints from a server's lists) are held as JSON reads them,
    so that a run compares equal to the pins it wrote."""
    found = {"logprobs": SurfaceResult("logprobs", "differs", {"text_offset_first": [-1, -1], "tokens": 8})}
    seen = observed(found)
    assert seen == {"logprobs": {"status": "differs", "details": {"text_offset_first": [-1, -1], "tokens": 8}}}
    assert changes("x", json.loads(json.dumps(seen)), seen) == []


def test_the_command_prints_the_diff_and_writes_the_pins_only_with_update(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pins = tmp_path / "pins.json"
    pins.write_text(json.dumps({"sglang": PINNED, "vllm": {"echo": ECHO}}))
    now = {**PINNED, "context boundary": _with(BOUNDARY, at_limit_generated=1009)}
    report = write_report("sglang", now, tmp_path / "reports")
    before = pins.read_text()

    assert main([str(report), "--pins", str(pins)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "sglang: context boundary: at_limit_generated: 1008 -> 1009",
        "1 changed details",
    ]
    assert pins.read_text() == before  # shown, not written

    assert main([str(report), "--pins", str(pins), "--update"]) == 0
    assert "sglang: context boundary: at_limit_generated: 1008 -> 1009" in capsys.readouterr().out
    assert read_pins(pins) == {"sglang": now, "vllm": {"echo": ECHO}}  # the other server's pins kept

    assert main([str(report), "--pins", str(pins), "--update"]) == 0
    assert capsys.readouterr().out.splitlines() == ["0 changed details (the pins hold)"]


def test_the_command_refuses_a_file_that_is_no_report_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "kill-matrix.json"
    other.write_text(json.dumps({"cells": []}))
    assert main([str(other), "--pins", str(tmp_path / "pins.json"), "--update"]) == 2
    [line] = capsys.readouterr().out.splitlines()
    assert line.endswith("kill-matrix.json: not an OpenAI surface report (no server and checks)"), line
    assert not (tmp_path / "pins.json").exists()


def test_the_committed_pins_hold_every_check_of_every_server_with_a_status_and_details() -> None:
    pins = read_pins(PINS)
    assert sorted(pins) == ["harness", "sglang", "vllm"]
    for server, checks in pins.items():
        assert sorted(checks) == sorted(CHECKS), server
        for name, entry in checks.items():
            assert sorted(entry) == ["details", "status"] and entry["details"], (server, name)
