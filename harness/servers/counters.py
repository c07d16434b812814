"""How far a server has got: requests finished and tokens generated, read from what each engine exposes.

The live progress needs these while lm-eval runs (lm-eval says nothing per task until it ends). The
harness server keeps them in ``/health``; SGLang (with ``--enable-metrics``) and vLLM in Prometheus
counters at ``/metrics``. A reading that fails is None: progress must never fail a run.
"""

from __future__ import annotations

import re
import urllib.request
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Callable

from harness.servers.identity import get_json


@dataclass(frozen=True)
class Counters:
    requests: int  # finished (served) requests since the server started
    tokens: int  # generated tokens since the server started


ReadCounters = Callable[[str], "Counters | None"]

# (requests, tokens) counter names per engine that exposes Prometheus metrics.
SGLANG_METRICS = ("sglang:num_requests_total", "sglang:generation_tokens_total")
VLLM_METRICS = ("vllm:request_success_total", "vllm:generation_tokens_total")


def health_counters(base_url: str) -> Counters | None:
    """The harness server's ``/health`` ``stats``."""
    health = get_json(base_url, "/health", timeout=2)
    stats = health.get("stats") if isinstance(health, dict) else None
    if not isinstance(stats, dict):
        return None
    return Counters(int(stats.get("requests_served") or 0), int(stats.get("generated_tokens") or 0))


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{.*\})?\s+(\S+)")


def prometheus_sums(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Each named metric summed over its label sets (a counter has one sample per label set, e.g. per model).
    Prometheus text format: ``name{labels} value [timestamp]``; ``#`` lines are comments."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match[1] not in names:
            continue
        try:
            sums[match[1]] = sums.get(match[1], 0.0) + float(match[2])
        except ValueError:
            continue
    return sums


def _metrics_text(base_url: str, timeout: float) -> str | None:
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=timeout) as resp:
            return resp.read().decode(errors="replace")
    except (OSError, ValueError):
        return None


def metrics_stats(base_url: str, names: Mapping[str, str]) -> dict[str, int]:
    """The counters ``names`` (Prometheus name -> the name a run keeps) that ``/metrics`` has; {} if it has none."""
    text = _metrics_text(base_url, timeout=5)
    sums = prometheus_sums(text, tuple(names)) if text is not None else {}
    return {short: int(sums[name]) for name, short in names.items() if name in sums}


def metrics_reader(requests_name: str, tokens_name: str) -> ReadCounters:
    """A reader of ``/metrics`` for one engine's counter names."""

    def read(base_url: str) -> Counters | None:
        text = _metrics_text(base_url, timeout=2)
        if text is None:
            return None
        sums = prometheus_sums(text, (requests_name, tokens_name))
        if requests_name not in sums:
            return None
        return Counters(int(sums[requests_name]), int(sums.get(tokens_name, 0)))

    return read


def any_counters(base_url: str) -> Counters | None:
    """A server of unknown kind (an external URL): whichever of the known sources answers."""
    for read in (health_counters, metrics_reader(*SGLANG_METRICS), metrics_reader(*VLLM_METRICS)):
        if (found := read(base_url)) is not None:
            return found
    return None
