"""How far a server has got: requests finished and tokens generated, read from what each engine exposes.

The live progress needs these while lm-eval runs (lm-eval says nothing per task until it ends). The
harness server keeps them in ``/health``; SGLang (with ``--enable-metrics``) and vLLM in Prometheus
counters at ``/metrics``. A reading that fails is None: progress must never fail a run.
"""

from __future__ import annotations

import dataclasses
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


@dataclass(frozen=True)
class CacheCounters:
    """A server's prefix cache since it started, from its own ``/metrics`` (every server kind maps its metric names
    onto these fields: ``CacheMetrics``); None where the server exposes no such count."""

    query_tokens: int | None  # prompt tokens looked up in the cache
    hit_tokens: int | None  # of them, served from it
    evicted: int | None  # tokens whose full KV the cache evicted
    swa_evicted: int | None  # tokens whose sliding-window KV it evicted
    tombstoned: int | None  # of those, tokens whose full KV it kept (an SWA tombstone)

    def __sub__(self, earlier: CacheCounters) -> CacheCounters:
        """What happened between two readings. A labelled counter appears at its first increment, so one the
        earlier reading lacks counts from 0; one the later reading lacks stays None."""

        def minus(later: int | None, before: int | None) -> int | None:
            return None if later is None else later - (before or 0)

        return CacheCounters(
            *(minus(getattr(self, f.name), getattr(earlier, f.name)) for f in dataclasses.fields(CacheCounters))
        )

    def pressure_missing(self) -> list[str]:
        """The eviction counts that did not move (or that the server does not expose): what keeps a pool that was
        meant to be tight from proving it was."""
        return [
            f"{name} {value if value is not None else '(none reported)'}"
            for name, value in (
                ("evicted", self.evicted),
                ("swa_evicted", self.swa_evicted),
                ("tombstoned", self.tombstoned),
            )
            if not value
        ]


# CacheCounters field -> the Prometheus metric that holds it on one kind of server.
CacheMetrics = Mapping[str, str]


def cache_counters(base_url: str, names: CacheMetrics) -> CacheCounters | None:
    """The server's cache counters under ``names``; None when ``/metrics`` does not answer."""
    text = _metrics_text(base_url, timeout=5)
    if text is None:
        return None
    sums = prometheus_sums(text, tuple(names.values()))
    read = {field: int(sums[name]) if name in sums else None for field, name in names.items()}
    return CacheCounters(**{f.name: read.get(f.name) for f in dataclasses.fields(CacheCounters)})


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
