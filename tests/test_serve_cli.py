"""``swa-harness serve`` with bad input: one line naming the problem, exit 2, no traceback; a readable --help."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.http_server.cli import build_parser, main


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


def test_schedule_reaches_the_engine_and_an_unknown_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--schedule overlap`` builds the engine with overlap scheduling (the fault-reach plans' async arm needs it
    through the server); anything else is refused by name before an engine is built."""
    import harness.http_server.cli as cli
    from harness.engine.overlap import Schedule

    (tmp_path / "config.json").write_text("{}")
    built = []

    def refuse(config: object) -> None:
        built.append(config)
        raise RuntimeError("stop here")

    monkeypatch.setattr(cli, "Engine", refuse)
    for given, expected in ((["--schedule", "overlap"], Schedule.OVERLAP), ([], Schedule.SYNC)):
        assert main(["--model", str(tmp_path), "--log-level", "error", *given]) == 2
        assert built.pop().schedule is expected
        assert "stop here" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        main(["--model", str(tmp_path), "--schedule", "eventually"])
    assert exit_.value.code == 2 and "--schedule: invalid choice: 'eventually'" in capsys.readouterr().err
    assert built == []
