"""The server as the eval orchestrator runs it: a subprocess started by ``launch_server``, called over
real HTTP, including by lm-eval's own ``local-completions`` model class."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.engine import Engine, EngineConfig, SamplingParams
from harness.servers.base import ServerSpec
from harness.servers.harness_server import HarnessServer, launch_server
from harness.servers.lifecycle import ServerLaunchError, ServerProcess
from tests.test_server import ENGINE_ARGS, MODEL, prompt_text, tokenized_checkpoint
from tests.waits import SERVER_START_S, scaled


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tokenized_checkpoint(tmp_path_factory.mktemp("server-process") / "ckpt")


@pytest.fixture(scope="module")
def ref(ckpt: Path) -> Engine:
    return Engine(EngineConfig(model_path=ckpt, **ENGINE_ARGS))


@pytest.fixture(scope="module")
def server(ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("server-log") / "server.log"
    proc = launch_server(
        ckpt,
        "tape",
        served_model_name=MODEL,
        max_running=32,
        num_threads=1,
        log_path=log,
        timeout=scaled(SERVER_START_S),
        env={"OMP_NUM_THREADS": "1"},
    )
    try:
        yield proc
    finally:
        code = proc.stop()
    assert code == 0 and not proc.alive(), proc.log_tail()  # SIGTERM is a clean shutdown
    assert "shutting down" in log.read_text()


def http(url: str, payload: Any = None) -> tuple[int, dict]:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_launch_server_reports_a_loopback_url_and_serves(server: ServerProcess, ref: Engine) -> None:
    assert server.base_url.startswith("http://127.0.0.1:") and server.alive()
    status, health = http(f"{server.base_url}/health")
    assert status == 200 and health["status"] == "ok" and health["graph_mode"] == "tape"
    prompt = prompt_text(1)
    status, body = http(server.completions_url, {"model": MODEL, "prompt": prompt, "max_tokens": 12})
    assert status == 200, body
    assert body["choices"][0]["text"] == ref.generate([prompt], SamplingParams(max_new_tokens=12))[0].text
    status, body = http(server.completions_url, {"prompt": prompt, "max_tokens": "12"})
    assert status == 400 and body["error"]["param"] == "max_tokens"
    ready_lines = [ln for ln in server.log_path.read_text().splitlines() if ln.startswith("SWA_HARNESS_SERVER_READY")]
    assert ready_lines == [f"SWA_HARNESS_SERVER_READY {server.base_url}"]


def test_the_harness_engine_reads_what_the_server_serves(server: ServerProcess, ckpt: Path) -> None:
    """The identity comes from the server's own /health: its code, the weights it loaded, its graph mode."""
    engine = HarnessServer()
    spec = ServerSpec(model=str(ckpt), served_name=MODEL, graphs="tape")
    identity = engine.identity(server.base_url, spec)
    weights = hashlib.sha256((ckpt / "model.safetensors").read_bytes()).hexdigest()
    assert (identity.engine, identity.model, identity.weights) == ("harness", MODEL, f"sha256:{weights}")
    assert identity.flags["graphs"] == "tape" and identity.version == identity.raw["build"]["code"]
    other = replace(identity, weights="sha256:" + "0" * 64)
    assert identity.model_differences(identity) == []
    assert identity.model_differences(other) == [f"weights sha256:{weights} vs sha256:{'0' * 64}"]


@pytest.mark.parametrize("num_concurrent", [1, 4])
def test_lm_eval_local_completions_calls_the_server(
    server: ServerProcess, ref: Engine, num_concurrent: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # lm-eval's API models need its [api] extra (tenacity); the project's eval extra pins plain lm-eval.
    pytest.importorskip("tenacity", reason="lm-eval's local-completions needs tenacity (pip install 'lm-eval[api]')")
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    payloads: list[dict] = []
    real = LocalCompletionsAPI._create_payload

    def spy(self, *args, **kwargs):  # record exactly what lm-eval puts on the wire
        payload = real(self, *args, **kwargs)
        payloads.append(json.loads(json.dumps(payload)))
        return payload

    monkeypatch.setattr(LocalCompletionsAPI, "_create_payload", spy)

    prompts = [prompt_text(3), prompt_text(9)]
    full = [ref.generate([p], SamplingParams(max_new_tokens=24))[0].text for p in prompts]
    # stop strings as the fixture tasks set them: one that cuts the first answer, plus the tasks' own
    stop = full[0].split(" ")[3]
    gen_kwargs = {"until": [stop, "\n\n", "Question:"], "do_sample": False, "temperature": 0.0, "max_gen_toks": 24}
    lm = LocalCompletionsAPI(
        base_url=server.completions_url,
        model=MODEL,
        tokenizer_backend=None,
        tokenized_requests=False,
        max_length=256,
        num_concurrent=num_concurrent,
        max_retries=1,
    )
    requests = [
        Instance(request_type="generate_until", doc={}, arguments=(p, dict(gen_kwargs)), idx=i)
        for i, p in enumerate(prompts)
    ]
    got = lm.generate_until(requests, disable_tqdm=True)

    want = [
        ref.generate([p], SamplingParams(max_new_tokens=24, stop=tuple(gen_kwargs["until"])))[0].text for p in prompts
    ]
    assert got == want
    assert got[0] == full[0][: full[0].find(stop)] and len(got[0]) < len(full[0])
    assert len(payloads) == 2
    for payload in payloads:
        assert payload == {
            "prompt": payload["prompt"],
            "model": MODEL,
            "max_tokens": 24,
            "temperature": 0.0,
            "stop": [stop, "\n\n", "Question:"],
            "seed": 1234,
        }
    assert sorted(p["prompt"] for p in payloads) == sorted(prompts)


def fake_python(tmp_path: Path, body: str) -> str:
    """A stand-in interpreter, so the launcher's failure paths run without importing torch."""
    script = tmp_path / "fake-python"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return str(script)


def test_launch_failure_carries_the_log_tail(tmp_path: Path) -> None:
    python = fake_python(tmp_path, 'echo "loading $4" >&2; echo "CheckpointError: no config.json in $4" >&2; exit 3')
    with pytest.raises(ServerLaunchError, match="exited with code 3") as err:
        launch_server(tmp_path / "nowhere", "off", log_path=tmp_path / "fail.log", python=python, timeout=scaled(120))
    assert f"no config.json in {tmp_path / 'nowhere'}" in str(err.value)
    # the one-line reason carries the server's own last words
    assert (
        err.value.reason == f"exited with code 3 before it was ready: CheckpointError: no config.json in "
        f"{tmp_path / 'nowhere'}"
    ), err.value.reason


def test_a_reason_keeps_one_line_of_the_last_exception(tmp_path: Path) -> None:
    from harness.servers.lifecycle import ERROR_CHARS, last_error

    log = tmp_path / "server.log"
    log.write_text(
        "Traceback (most recent call last):\n  ValueError: first\n(EngineCore pid=1) ERROR core.py:1510] "
        "ValueError: To serve at least one request " + "x" * 500 + "\nshutting down\n"
    )
    found = last_error(log)
    assert found.startswith(": ValueError: To serve at least one request") and len(found) == ERROR_CHARS + 2
    log.write_text(
        "ERROR TypeError: unsupported operand\nException: init failed. See stack trace for root cause.\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    assert last_error(log) == ": TypeError: unsupported operand"  # the cause, not the wrappers pointing at it
    log.write_text("INFO all fine\n")
    assert last_error(log) == "" and last_error(tmp_path / "absent.log") == ""


def test_launch_timeout_kills_the_process(tmp_path: Path) -> None:
    python = fake_python(tmp_path, 'echo "still loading" >&2; exec sleep 60')
    with pytest.raises(ServerLaunchError, match="not ready after 1 s") as err:
        launch_server(tmp_path, "off", log_path=tmp_path / "slow.log", python=python, timeout=1)
    assert "still loading" in str(err.value)


def serving_python(tmp_path: Path, before: str = "", delay_s: float = 0.0) -> str:
    """A stand-in server: prints ``before``, its URL, then (after ``delay_s``) answers GET /health with 200."""
    root = tmp_path / "www"
    root.mkdir(exist_ok=True)
    (root / "health").write_text("ok")
    code = (
        f"import http.server, os, time; os.chdir({str(root)!r}); "
        "s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), http.server.SimpleHTTPRequestHandler); "
        f"print({before!r}); print(f'SWA_HARNESS_SERVER_READY http://127.0.0.1:{{s.server_port}}', flush=True); "
        f"s.socket.close() if {delay_s} else None; time.sleep({delay_s}); "
        "s = http.server.ThreadingHTTPServer(('127.0.0.1', s.server_port), http.server.SimpleHTTPRequestHandler) "
        f"if {delay_s} else s; s.serve_forever()"
    )
    return fake_python(tmp_path, f'exec python3 -c "{code}"')


def test_ready_line_is_found_among_other_output(tmp_path: Path) -> None:
    python = serving_python(tmp_path, before="hello")
    with launch_server(tmp_path, "off", log_path=tmp_path / "ok.log", python=python, timeout=scaled(120)) as proc:
        assert proc.base_url.startswith("http://127.0.0.1:") and proc.alive() and proc.pid > 0
        assert "hello" in (tmp_path / "ok.log").read_text()
    assert not proc.alive()


def test_sigterms_that_race_a_shutdown_still_exit_0(ckpt: Path, tmp_path: Path) -> None:
    """The group's SIGTERM and the guard's forwarded one both reach the server: it used to exit 143 when the second
    landed after its handler was gone. Here SIGTERMs keep coming through the whole shutdown."""
    log = tmp_path / "server.log"
    proc = launch_server(
        ckpt, "off", served_model_name=MODEL, log_path=log, timeout=scaled(SERVER_START_S), env={"OMP_NUM_THREADS": "1"}
    )
    server_pid = next(int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == proc.pid)
    os.kill(server_pid, signal.SIGTERM)
    deadline = time.monotonic() + scaled(60)
    while proc.alive() and time.monotonic() < deadline:
        try:
            os.kill(server_pid, signal.SIGTERM)
        except ProcessLookupError:
            break
        time.sleep(0.005)
    assert proc.stop() == 0, proc.log_tail()
    assert "shutting down" in log.read_text()


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def test_readiness_is_polled_until_the_port_answers(tmp_path: Path) -> None:
    """The URL is printed 2 s before the port opens: the launch waits for /health, not for the line."""
    python = serving_python(tmp_path, delay_s=2.0)
    start = time.monotonic()
    with launch_server(tmp_path, "off", log_path=tmp_path / "ok.log", python=python, timeout=scaled(120)) as proc:
        assert time.monotonic() - start >= 2.0
        with urllib.request.urlopen(proc.base_url + "/health", timeout=5) as resp:
            assert resp.status == 200
    assert not proc.alive()


def test_a_port_that_never_opens_is_a_bounded_wait_that_names_it(tmp_path: Path) -> None:
    python = fake_python(
        tmp_path, 'echo "SWA_HARNESS_SERVER_READY http://127.0.0.1:9"; echo "loading shards" >&2; exec sleep 60'
    )
    start = time.monotonic()
    with pytest.raises(ServerLaunchError) as err:
        launch_server(tmp_path, "off", log_path=tmp_path / "never.log", python=python, timeout=2)
    assert time.monotonic() - start < 15
    assert err.value.reason == "was not ready after 2 s (http://127.0.0.1:9/health never answered; killed)"
    assert "loading shards" in str(err.value)  # the log's last lines are in the message


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA device")
def test_cuda_graph_server_answers_as_the_eager_server(tmp_path: Path) -> None:
    """Two harness servers on one GPU, started by the jobs' lifecycle: CUDA graphs vs graphs off, 24 concurrent
    prompts of several lengths (batches pad into buckets), the shipped trained checkpoint: the same text."""
    from concurrent.futures import ThreadPoolExecutor

    from harness.paths import DEFAULT_MODEL

    servers = [
        launch_server(
            DEFAULT_MODEL,
            mode,
            served_model_name="m",
            max_running=32,
            log_path=tmp_path / f"{mode}.log",
            extra_args=["--device", "cuda"],
            timeout=300,
        )
        for mode in ("cuda", "off")
    ]
    try:
        status, health = http(f"{servers[0].base_url}/health")
        assert status == 200 and health["graph_mode"] == "cuda", health
        prompts = [
            f"Question: Tom has {3 + i} apples and buys {i * 7 % 11 + 2} more. " * (1 + i % 3) + "How many?\nAnswer:"
            for i in range(24)
        ]

        def answers(server: ServerProcess) -> list[str]:
            def one(prompt: str) -> str:
                code, body = http(
                    server.completions_url, {"model": "m", "prompt": prompt, "max_tokens": 48, "temperature": 0}
                )
                assert code == 200, body
                return body["choices"][0]["text"]

            with ThreadPoolExecutor(24) as pool:
                return list(pool.map(one, prompts))

        on, off = (answers(s) for s in servers)
        assert on == off
        status, health = http(f"{servers[0].base_url}/health")
        assert health["stats"].get("forward_paths", {}).get("decode-graph", 0) > 0, health["stats"]
    finally:
        for server in servers:
            server.stop()
