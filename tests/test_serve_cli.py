"""``swa-harness serve`` with bad input: one line naming the problem, exit 2, no traceback; a readable --help."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.server.cli import build_parser, main


def test_a_missing_model_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--model", str(tmp_path / "nope")]) == 2
    assert (
        capsys.readouterr().err
        == f"swa-harness serve: --model {tmp_path / 'nope'}: not a checkpoint (no such folder)\n"
    )
    assert main(["--model", str(tmp_path)]) == 2
    assert "not a checkpoint (no config.json in it)" in capsys.readouterr().err


def test_a_checkpoint_the_engine_cannot_build_gives_its_reason_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "llama"}')
    assert main(["--model", str(tmp_path), "--log-level", "warning"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "unsupported model_type" in err, err
    assert err.strip().splitlines()[-1].startswith("swa-harness serve: engine failed to start: ")


def test_help_names_the_command_people_type_and_has_no_markup() -> None:
    text = build_parser().format_help()
    assert text.startswith("usage: swa-harness serve ") and "``" not in text
