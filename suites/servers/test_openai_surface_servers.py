"""Every server's OpenAI surface through the official ``openai`` client (``suites/servers/surface.py``): the harness
server and real vLLM on the shipped Gemma2 checkpoint, real SGLang on the random word-level Mellum of
``test_sglang_server.py``.

What a real server does differently is a finding about it, not a failure of ours, so what each server was seen to do
is pinned detail by detail in ``surface_pins.json``: a run writes ``reports/openai-surface-<server>.json`` and fails
naming every detail that changed either way (a release that fixes a difference, or breaks what held);
``python -m suites.servers.surface_pins --update <report>`` prints that diff and accepts it. The harness row runs in
``nox -s tests``; SGLang's and vLLM's in ``nox -s sglang_server`` and ``nox -s vllm`` (``.ci/run`` too), each on the
server its session's oracle test started (``suites/servers/shared.py``: alone, a row took 2.5-3 minutes here, most of
it the server's start; sharing, it adds its checks only).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import pytest

from harness.env import SGLANG_SERVER_ENV, VLLM_SERVER_ENV
from harness.paths import REPO, shown
from harness.servers.base import ServerKind, ServerSpec
from harness.servers.sglang_server import CPU_FLAGS, SGLangServer
from harness.servers.vllm import VLLMServer
from suites.servers.oracles import free_port
from suites.servers.shared import SHARED_WITH, SharedServers
from suites.servers.surface import Surface, SurfaceResult, run_checks
from suites.servers.surface_pins import held, observed, read_pins, write_report

GEMMA2 = REPO / "fixtures" / "models" / "gemma2-tiny-swa"
# The servers the oracle tests start, spelled as they spell them (served name and flags, in order): a spec that
# differs in anything but its port starts a server of its own (suites/servers/shared.py).
SGLANG_ROOMY = ("tiny-mellum", (*CPU_FLAGS, "--max-total-tokens", "8192"))  # test_sglang_server.py's `server`
VLLM_ROOMY = ("swa-harness", ("--dtype", "float32", "--max-model-len", "1024", "--block-size", "32"))  # eager


@contextmanager
def _harness(request: pytest.FixtureRequest, tmp: Path) -> Iterator[Surface]:
    from harness.servers.harness_server import launch_server

    with launch_server(GEMMA2, "tape", served_model_name="m", log_path=tmp / "server.log") as server:
        yield Surface(server.base_url, "m", GEMMA2, {})


def _shared(request: pytest.FixtureRequest, engine: ServerKind, ckpt: Path, roomy: tuple) -> nullcontext[Surface]:
    """The session's server of this spec: the one its oracle test started, or started now when this row runs first."""
    assert request.node.nodeid in SHARED_WITH, f"{request.node.nodeid} is not in suites/servers/shared.py SHARED_WITH"
    served, flags = roomy
    shared: SharedServers = request.getfixturevalue("shared_servers")
    spec = ServerSpec(model=str(ckpt), served_name=served, graphs="off", flags=flags, port=free_port())
    server, was_running = shared.get(engine, spec, timeout=900)
    print(f"{engine.name}: {'shared the server an earlier test started' if was_running else 'started its server'}")
    return nullcontext(Surface(server.base_url, served, ckpt, {"ignore_eos": True}))


def _sglang(request: pytest.FixtureRequest, tmp: Path) -> AbstractContextManager[Surface]:
    return _shared(request, SGLangServer(), request.getfixturevalue("mellum_words_ckpt"), SGLANG_ROOMY)


def _vllm(request: pytest.FixtureRequest, tmp: Path) -> AbstractContextManager[Surface]:
    return _shared(request, VLLMServer(), GEMMA2, VLLM_ROOMY)


def _param(name: str, kind: ServerKind, require: str) -> object:
    """A real server's row skips where its engine is missing, unless its session requires the engine: then it runs
    and fails, naming what is missing."""
    missing = kind.missing()
    if missing is None or os.environ.get(require) == "require":
        return pytest.param(name, id=name)
    return pytest.param(name, id=name, marks=pytest.mark.skip(reason=missing))


SERVERS = {"harness": _harness, "sglang": _sglang, "vllm": _vllm}


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("harness", id="harness"),
        _param("sglang", SGLangServer(), SGLANG_SERVER_ENV),
        _param("vllm", VLLMServer(), VLLM_SERVER_ENV),
    ],
)
def test_each_servers_openai_surface_is_what_it_was_seen_to_be(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    started = time.monotonic()
    with SERVERS[name](request, tmp_path) as surface:
        ready = time.monotonic()
        found: dict[str, SurfaceResult] = run_checks(surface)
        checked = time.monotonic()
    for result in found.values():
        print(f"{name}: {result.line()}")
    print(f"{name}: server ready in {ready - started:.0f} s, checks {checked - ready:.0f} s")
    seen = observed(found)
    print(f"{name}: wrote {shown(write_report(name, seen))}")
    problem = held(name, seen, read_pins())
    assert problem is None, problem
