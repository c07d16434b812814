"""A server that does not echo prompt logprobs gives the loglikelihood check no verdict (suites/servers/loglikelihood.py):
one request shaped as lm-eval's finds it before lm-eval runs or transformers loads, and the check ends in one line,
``NO VERDICT: ...``, naming what the server returned, never an AssertionError that would read as a wrong answer. Held
against a real local HTTP server that answers the way such servers do (a refusal, the generated token's logprobs only,
no logprobs at all), and against one that echoes, which the probe lets through."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from suites.servers.cache_hits import NoVerdict
from suites.servers.loglikelihood import ECHO_REQUEST, check_lm_eval_loglikelihoods, echo_problem, hold_loglikelihood


@dataclass
class FakeServer:
    """/v1/completions answers ``status`` with ``answer`` (JSON) to every POST and keeps each request's body."""

    url: str = ""
    status: int = 200
    answer: Any = None
    asked: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    server = FakeServer()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            server.asked.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            body = json.dumps(server.answer).encode()
            self.send_response(server.status if self.path == "/v1/completions" else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield server
    httpd.shutdown()
    httpd.server_close()


def _choice(logprobs: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "text": " 5", "finish_reason": "length", "logprobs": logprobs}]}


GENERATED_ONLY = {"tokens": [" 5"], "token_logprobs": [-0.4], "top_logprobs": [{" 5": -0.4}], "text_offset": [0]}
ECHOED = {
    "tokens": ["<bos>", "Question", ":", " 5"],
    "token_logprobs": [None, -3.1, -0.2, -0.4],
    "top_logprobs": [None, {"Question": -3.1}, {":": -0.2}, {" 5": -0.4}],
    "text_offset": [0, 0, 8, 9],
}
# (status, answer) -> words the one-line reason must contain
NO_ECHO = {
    "refused": (400, {"error": {"message": "echo=True is not supported"}}, "HTTP 400: .*echo=True is not supported"),
    "generated-only": (200, _choice(GENERATED_ONLY), "did not echo the prompt's logprobs: token_logprobs \\[-0.4\\]"),
    "no-logprobs": (200, _choice(None), "returned logprobs null, not prompt logprobs"),
    "no-choices": (200, {"choices": []}, "returned no choice with logprobs"),
    "no-tops": (200, _choice({**ECHOED, "top_logprobs": None}), "without a top-1 entry for each"),
}


@pytest.mark.parametrize("case", NO_ECHO, ids=list(NO_ECHO))
def test_a_server_that_does_not_echo_gives_no_verdict_in_one_line(
    case: str, fake: FakeServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake.status, fake.answer, says = NO_ECHO[case]
    absent = tmp_path / "no-checkpoint"  # transformers would fail to load it: the probe comes first
    with pytest.raises(pytest.fail.Exception) as failed:
        check_lm_eval_loglikelihoods(fake.url, "m", absent, 1e-3, monkeypatch, server="fake")
    said = str(failed.value)
    assert said.startswith("NO VERDICT: ") and "\n" not in said, said
    assert f"{fake.url} on lm-eval's loglikelihood request" in said
    assert re.search(says, said), said
    assert len(fake.asked) == 1 and fake.asked[0].items() >= ECHO_REQUEST.items(), fake.asked  # lm-eval never ran


def test_hold_loglikelihood_raises_no_verdict_before_loading_anything(fake: FakeServer, tmp_path: Path) -> None:
    """The same without pytest's wrapper (and without lm-eval installed): ``NoVerdict``, no AssertionError."""
    fake.status, fake.answer, _ = NO_ECHO["generated-only"]
    with pytest.raises(NoVerdict, match="did not echo the prompt's logprobs"):
        hold_loglikelihood(fake.url, "m", tmp_path / "no-checkpoint", None, 1e-3)


def test_a_server_that_echoes_passes_the_probe(fake: FakeServer) -> None:
    fake.answer = _choice(ECHOED)
    assert echo_problem(fake.url, "m") is None
    assert fake.asked[0]["echo"] is True and fake.asked[0]["max_tokens"] == 1 and fake.asked[0]["logprobs"] == 1
