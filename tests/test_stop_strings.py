"""Stop strings end generation and are cut from the text, in the engine and through the server, checked against
an independent matcher (``fixtures.scenarios.stops.expected_stop``: regular expressions over the streamed text)
on stop strings placed across tokens, overlapping, at the first and last token, and ones that never match."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixtures.scenarios.stops import cases, expected_stop, stop_sets
from fixtures.tokenized import prompt_text, tokenized_checkpoint
from harness.engine import Engine, EngineConfig, SamplingParams
from harness.servers.harness_server import launch_server
from tests.waits import SERVER_START_S, scaled

NEW = 24
PROMPT = prompt_text(3, n_words=10)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tokenized_checkpoint(tmp_path_factory.mktemp("stops") / "ckpt")


@pytest.fixture(scope="module")
def engine(ckpt: Path) -> Engine:
    return Engine(EngineConfig(model_path=ckpt, graphs="tape", max_running_requests=8, num_threads=1))


@pytest.fixture(scope="module")
def free(engine: Engine) -> tuple[str, list[int]]:
    """The continuation without stop strings, and where each of its tokens ends in the text."""
    out = engine.generate([PROMPT], SamplingParams(max_new_tokens=NEW, ignore_eos=True))[0]
    tok = engine.tokenizer
    ends = [len(tok.decode(out.output_ids[:k])) for k in range(1, len(out.output_ids) + 1)]
    assert out.text == tok.decode(out.output_ids) and ends[-1] == len(out.text)
    assert all(out.text.startswith(tok.decode(out.output_ids[:k])) for k in range(1, NEW))  # streamed prefixes
    return out.text, ends


def _run(engine: Engine, stops: tuple[str, ...]):
    return engine.generate([PROMPT], SamplingParams(max_new_tokens=NEW, ignore_eos=True, stop=stops))[0]


def test_every_named_case_in_the_engine(engine: Engine, free: tuple[str, list[int]]) -> None:
    text, ends = free
    for case in cases(text, ends):
        want = expected_stop(text, ends, case.stops)
        out = _run(engine, case.stops)
        assert (out.text, out.matched_stop) == (want.text, want.stop), case.name
        assert out.finish_reason == ("stop" if want.stop else "length"), case.name
        assert len(out.output_ids) == want.tokens, case.name  # it ended at the token that completed the stop


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_stop_set_in_the_engine(engine: Engine, free: tuple[str, list[int]], data) -> None:
    text, ends = free
    stops = data.draw(stop_sets(text, ends))
    want = expected_stop(text, ends, stops)
    out = _run(engine, stops)
    assert (out.text, out.matched_stop, out.finish_reason, len(out.output_ids)) == (
        want.text,
        want.stop,
        "stop" if want.stop else "length",
        want.tokens,
    )


def test_every_named_case_through_the_server(ckpt: Path, free: tuple[str, list[int]], tmp_path: Path) -> None:
    text, ends = free
    with launch_server(
        ckpt, "tape", served_model_name="m", log_path=tmp_path / "server.log", timeout=scaled(SERVER_START_S)
    ) as server:
        for case in cases(text, ends):
            body = json.dumps(
                {
                    "model": "m",
                    "prompt": PROMPT,
                    "max_tokens": NEW,
                    "temperature": 0,
                    "ignore_eos": True,
                    "stop": list(case.stops),
                }
            ).encode()
            request = urllib.request.Request(
                server.completions_url, data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=scaled(60)) as resp:
                choice = json.loads(resp.read())["choices"][0]
            want = expected_stop(text, ends, case.stops)
            assert (choice["text"], choice["finish_reason"]) == (want.text, "stop" if want.stop else "length"), (
                case.name
            )
