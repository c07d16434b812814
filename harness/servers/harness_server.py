"""The harness's own server (``python -m harness.http_server``) as an engine: the default of every CPU job."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.servers.base import ServerKind, ServerSpec
from harness.servers.counters import Counters, health_counters
from harness.evals.results import ServedIdentity
from harness.servers.identity import server_identity
from harness.servers.guard import CHILDREN, ChildProcesses
from harness.servers.lifecycle import Command, ServerProcess
from harness.env import FAULT_ENV, OFFLINE_ENV, SERVER_READY
from harness.reuse import code_fingerprint

GRAPH_MODES = ("tape", "cuda", "auto", "eager", "off")


class HarnessServer(ServerKind):
    name = "harness"
    stop_grace_s = 30.0
    cache_metrics = {
        "query_tokens": "swa_harness:prompt_tokens_total",
        "hit_tokens": "swa_harness:cached_tokens_total",
        "evicted": "swa_harness:evicted_tokens_total",
        "swa_evicted": "swa_harness:swa_evicted_tokens_total",
        "tombstoned": "swa_harness:swa_tombstoned_tokens_total",
    }

    def graph_flags(self, graphs: str, flags: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The server's own mode ("on" is its ``auto``: CUDA graphs on a GPU, the tape on CPU)."""
        mode = "auto" if graphs == "on" else graphs
        if mode not in GRAPH_MODES:
            raise ValueError(f"the harness server has no graph mode {graphs!r}; known: on, {', '.join(GRAPH_MODES)}")
        return ("--graphs", mode)

    def command(self, spec: ServerSpec) -> Command:
        argv = (
            "python",
            "-m",
            "harness.http_server",
            "--model",
            spec.model,
            *self.graph_flags(spec.graphs),
            "--host",
            "127.0.0.1",
            "--port",
            str(spec.port),
            "--served-model-name",
            spec.served_name,
            *spec.flags,
        )
        return Command(argv, {**OFFLINE_ENV, FAULT_ENV: spec.fault or "", **spec.env})

    def url_from_line(self, line: str) -> str | None:
        """The server prints ``SWA_HARNESS_SERVER_READY <url>`` once listening (it picks its own port)."""
        return line.split(" ", 1)[1].strip() if line.startswith(SERVER_READY + " ") else None

    def counters(self, base_url: str) -> Counters | None:
        return health_counters(base_url)

    def identity(self, base_url: str, spec: ServerSpec) -> ServedIdentity:
        """Everything from the server's /health: its build names the code, the weights it loaded and its settings."""
        raw = server_identity(base_url)
        build = raw.get("build") if isinstance(raw.get("build"), dict) else {}
        return ServedIdentity(
            engine=self.name,
            version=str(build.get("code") or code_fingerprint()),
            model=str(raw.get("model", spec.served_name)),
            weights=build.get("weights"),
            tokenizer=build.get("tokenizer"),
            flags={
                "graphs": raw.get("graph_mode", spec.graphs),
                **{k: v for k, v in build.items() if k not in ("code", "weights", "tokenizer")},
            },
            raw=raw,
        )


def launch_server(
    model_path: str | os.PathLike,
    graphs: str = "auto",
    *,
    max_running: int = 32,
    num_threads: int = 1,
    served_model_name: str | None = None,
    max_context_len: int | None = None,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log_path: str | os.PathLike | None = None,
    timeout: float = 300.0,
    python: str = sys.executable,
    children: ChildProcesses = CHILDREN,
) -> ServerProcess:
    """One harness server on a free port, ready to serve (tests and benchmarks; jobs go through plans).

    ``log_path`` defaults to a fresh temporary file (see ``.log_path``); ``children`` owns the process.
    """
    flags = ["--max-running", str(max_running), "--num-threads", str(num_threads), *extra_args]
    if max_context_len is not None:
        flags += ["--max-context-len", str(max_context_len)]
    spec = ServerSpec(
        model=str(model_path),
        served_name=served_model_name or str(model_path),
        graphs=graphs,
        flags=tuple(flags),
        env=dict(env or {}),
    )
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix="swa-harness-server-", suffix=".log")
        os.close(fd)
        log_path = name
    return HarnessServer().start(spec, log_path=Path(log_path), timeout=timeout, python=python, children=children)
