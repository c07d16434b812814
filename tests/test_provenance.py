"""Provenance: what an eval records about the engine, model, arms, hardware and data it ran with."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from harness.evals.results import RunRecord, RunResult
from harness.jobs.cpu import EvalConfig, cpu_plan
from harness.jobs.options import RunOptions
from harness.jobs.recording import comparison_provenances, job_provenance, relevant_env
from harness.paths import DEFAULT_MODEL, REPO
from harness.servers.registry import get_server_kind


def _logs(out: Path, label: str, server: str, lm_eval: str) -> None:
    arm = out / DEFAULT_MODEL.name / label
    arm.mkdir(parents=True, exist_ok=True)
    (arm / "server.log").write_text(f"$ {server}\nserver output\n")
    (arm / "lm_eval-all.log").write_text(f"$ {lm_eval}\nlm-eval output\n")


def provenance(config: EvalConfig, runs: list[RunResult] = ()) -> dict:
    """The record the job keeps with its one comparison."""
    plan = cpu_plan(config)
    options = RunOptions(argv=config.argv, device=config.device)
    base = job_provenance(plan, options.command_line, options.device)
    comparison = plan.comparisons[0]
    return comparison_provenances(plan, runs, base)[comparison.model.slug, comparison.name]


def test_provenance_of_a_launched_eval(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for label in ("on", "off"):
        _logs(tmp_path, label, f"python -m harness.http_server --graphs {label}", f"python -m lm_eval run ({label})")
    config = EvalConfig(
        limits={"gsm_style": 3}, out=tmp_path, fault="pad-swa-loc-not-zeroed", argv=("--limit-gsm-style", "3")
    )
    prov = provenance(config)
    assert list(prov) == ["run", "engine under test", "model", "arms", "hardware", "software", "datasets"]
    json.dumps(prov)  # saved as provenance.json and in the history
    engine = prov["engine under test"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert engine["commit"] == (head or "unknown") and isinstance(engine["dirty"], bool)
    assert engine["summary"].startswith(f"harness {engine['commit'][:10]}")
    weights = hashlib.sha256((DEFAULT_MODEL / "model.safetensors").read_bytes()).hexdigest()
    assert prov["model"]["model.safetensors sha256"] == weights
    on, off = prov["arms"]["on"], prov["arms"]["off"]
    assert on["server command"] == "python -m harness.http_server --graphs on"  # read from the log, not rebuilt
    assert off["lm-eval command"] == "python -m lm_eval run (off)"
    assert on["fault"] == "pad-swa-loc-not-zeroed" and off["fault"] == "none"
    assert on["env"]["SWA_HARNESS_FAULT"] == "pad-swa-loc-not-zeroed" and off["env"]["SWA_HARNESS_FAULT"] == ""
    assert on["engine"] == off["engine"] == "harness"
    assert on["env"]["HF_HUB_OFFLINE"] == "1" and on["env"]["OMP_NUM_THREADS"] == "1"
    assert "HF_TOKEN" not in on["env"] and "hf_secret" not in json.dumps(prov)  # secrets never recorded
    assert prov["hardware"]["device"] == "cpu" and prov["hardware"]["logical cores"] >= 1
    assert re.fullmatch(r"\d+\.\d+.*", prov["software"]["torch"]) and prov["software"]["lm-eval"]
    assert set(prov["datasets"]) == {"gsm_style"}
    assert {"gsm_style.yaml", "test.jsonl", "fewshot.jsonl"} <= set(prov["datasets"]["gsm_style"])
    assert all(re.fullmatch(r"[0-9a-f]{16}", h) for h in prov["datasets"]["gsm_style"].values())
    assert prov["run"]["command"] == "swa-harness eval --limit-gsm-style 3" and prov["run"]["id"]


def test_secret_looking_variables_are_left_out() -> None:
    env = {
        "HF_TOKEN": "x",
        "SWA_HARNESS_API_KEY": "x",
        "CUDA_VISIBLE_DEVICES": "0",
        "TOKENIZERS_PARALLELISM": "false",
        "PATH": "/bin",
        "SWA_HARNESS_FAULT": "",
    }
    assert relevant_env(env) == {
        "CUDA_VISIBLE_DEVICES": "0",
        "SWA_HARNESS_FAULT": "",
        "TOKENIZERS_PARALLELISM": "false",
    }


class _SGLangInfo(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        answers = {"/get_server_info": {"version": "0.5.23"}, "/v1/models": {"data": [{"id": "m"}]}}
        body = json.dumps(answers.get(self.path, {})).encode()
        self.send_response(200 if self.path in answers else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def sglang_server():
    server = HTTPServer(("127.0.0.1", 0), _SGLangInfo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_an_external_server_is_the_engine_under_test(tmp_path, sglang_server, monkeypatch) -> None:
    checkout = tmp_path / "sglang"
    checkout.mkdir()
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], cwd=checkout, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], cwd=checkout, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()
    monkeypatch.setenv("SWA_HARNESS_SGLANG", str(checkout))
    config = EvalConfig(limits={"gsm_style": 3}, out=tmp_path, on_url=sglang_server, off_url=sglang_server)
    plan = cpu_plan(config)
    engine = plan.runs[0].arm.engine
    identity = get_server_kind(engine).identity(sglang_server, plan.runs[0].spec)  # what the server reports
    runs = [  # as the job saves them: under the plan's model, each arm's identity in its record
        RunResult("gsm_style", "on", plan.models[0].slug, True, None, [], 0.0, RunRecord(arm, identity=identity))
        for arm in ("on", "off")
    ]
    prov = provenance(config, runs)
    engine = prov["engine under test"]
    assert engine["summary"] == "sglang 0.5.23" and engine["servers"]["on"].endswith("sglang 0.5.23"), engine
    assert engine["sglang source"] == {"spec": str(checkout), "commit": sha, "dirty": False}
    arms = prov["arms"]
    assert arms["on"]["server"] == f"external: {sglang_server}" and "env" not in arms["on"]
