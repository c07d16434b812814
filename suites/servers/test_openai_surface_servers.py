"""Every server's OpenAI surface through the official ``openai`` client (``suites/servers/surface.py``): the harness
server, and real SGLang and vLLM on CPU, each on a shipped checkpoint.

What a real server does differently is a finding about it, not a failure of ours, so each server's answers are pinned
in ``EXPECTED``: the test fails when a check changes either way (a release that fixes a difference, or breaks what
held), naming the check and what it saw. SGLang and vLLM are ``extended`` (a server start each, 1-2 minutes here):
``nox -s sglang_server`` / ``nox -s vllm`` run them, ``.ci/run`` does not.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.env import SGLANG_SERVER_ENV, VLLM_SERVER_ENV
from harness.paths import REPO
from harness.servers.base import ServerSpec
from harness.servers.sglang_server import CPU_FLAGS, SGLangServer
from harness.servers.vllm import VLLMServer
from suites.servers.oracles import free_port, running
from suites.servers.surface import Surface, SurfaceResult, run_checks

MODELS = REPO / "fixtures" / "models"
HOLDS = {
    "multi-prompt order": "holds",
    "usage counts": "holds",
    "stop across tokens": "holds",
    "context boundary": "holds",
    "streaming": "holds",
    "logprobs": "holds",
}
# What each server was seen to do (measured 2026-11-27; docs/FINDINGS.md, "The OpenAI surface", says what differs).
EXPECTED: dict[str, dict[str, str]] = {
    "harness": {**HOLDS, "echo": "refused", "n=2": "refused"},
    # SGLang 0.5.23: text_offset is -1 for every token; at prompt + max_tokens = max_model_len it generates 2 fewer.
    "sglang": {**HOLDS, "context boundary": "differs", "logprobs": "differs", "echo": "honoured", "n=2": "honoured"},
    # vLLM 0.32.0: one token past max_model_len is accepted and generates what fits; n > 1 refused when greedy.
    "vllm": {**HOLDS, "context boundary": "differs", "echo": "honoured", "n=2": "refused"},
}


def _harness(tmp: Path) -> Iterator[Surface]:
    from harness.servers.harness_server import launch_server

    ckpt = MODELS / "gemma2-tiny-swa"
    with launch_server(ckpt, "tape", served_model_name="m", log_path=tmp / "server.log") as server:
        yield Surface(server.base_url, "m", ckpt, {})


def _real(kind: SGLangServer | VLLMServer, ckpt: Path, flags: tuple[str, ...], tmp: Path) -> Iterator[Surface]:
    spec = ServerSpec(model=str(ckpt), served_name="m", graphs="off", flags=flags, port=free_port())
    with running(kind, spec, tmp / "server.log", timeout=900) as server:
        yield Surface(server.base_url, "m", ckpt, {"ignore_eos": True})


def _sglang(tmp: Path) -> Iterator[Surface]:
    yield from _real(SGLangServer(), MODELS / "mellum-tiny-swa", (*CPU_FLAGS, "--max-total-tokens", "8192"), tmp)


def _vllm(tmp: Path) -> Iterator[Surface]:
    flags = ("--dtype", "float32", "--block-size", "32", "--max-model-len", "1024")
    yield from _real(VLLMServer(), MODELS / "gemma2-tiny-swa", flags, tmp)


def _param(name: str, kind: SGLangServer | VLLMServer | None, require: str | None) -> object:
    missing = kind.missing() if kind is not None else None
    if missing is not None and require and os.environ.get(require) == "require":
        return pytest.param(name, id=name, marks=pytest.mark.extended)  # fails below, naming what is missing
    marks = [pytest.mark.extended] if kind is not None else []
    if missing is not None:
        marks.append(pytest.mark.skip(reason=str(missing)))
    return pytest.param(name, id=name, marks=marks)


SERVERS = {"harness": _harness, "sglang": _sglang, "vllm": _vllm}


@pytest.mark.parametrize(
    "name",
    [
        _param("harness", None, None),
        _param("sglang", SGLangServer(), SGLANG_SERVER_ENV),
        _param("vllm", VLLMServer(), VLLM_SERVER_ENV),
    ],
)
def test_each_servers_openai_surface_is_what_it_was_seen_to_be(name: str, tmp_path: Path) -> None:
    found: dict[str, SurfaceResult] = {}
    for surface in SERVERS[name](tmp_path):
        found = run_checks(surface)
    for result in found.values():
        print(f"{name}: {result.check}: {result.status}: {result.detail}")
    seen = {check: result.status for check, result in found.items()}
    changed = [
        f"{check}: {seen.get(check)} (was {want}): {found[check].detail if check in found else 'not run'}"
        for check, want in EXPECTED[name].items()
        if seen.get(check) != want
    ]
    assert not changed, f"{name}'s OpenAI surface changed: " + " | ".join(changed)
