"""``GET /metrics``: the server's counters in Prometheus' text format, as SGLang and vLLM serve theirs, so that a
suite or a dashboard reads all three servers the same way (``harness.servers.counters.prometheus_sums``).

One table drives the page: each row is a metric's name, its type, what it counts and where the value comes from
(the worker's counters, or what the pools and the prefix cache hold). The prefix cache's evictions are the
scheduler's measured ledger (``harness.mem.eviction``), not a number the tree reports about itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from harness.http_server.worker import PoolOccupancy, WorkerStats

PREFIX = "swa_harness:"


@dataclass(frozen=True)
class Metric:
    name: str  # without PREFIX
    kind: Literal["counter", "gauge"]
    help: str
    value: Callable[[WorkerStats, PoolOccupancy | None], float | None]  # None: not known yet (no engine)


def _cache(read: Callable[[PoolOccupancy], float]) -> Callable[[WorkerStats, PoolOccupancy | None], float | None]:
    return lambda _stats, pools: None if pools is None else read(pools)


METRICS: tuple[Metric, ...] = (
    Metric(
        "num_requests_total", kind="counter", help="Prompts served with a result.", value=lambda s, _: s.requests_served
    ),
    Metric(
        "num_failed_requests_total",
        kind="counter",
        help="Prompts refused or lost.",
        value=lambda s, _: s.requests_failed,
    ),
    Metric("generation_tokens_total", kind="counter", help="Tokens generated.", value=lambda s, _: s.generated_tokens),
    Metric(
        "engine_failures_total", kind="counter", help="Engine steps that raised.", value=lambda s, _: s.engine_failures
    ),
    Metric("num_running_reqs", kind="gauge", help="Requests in the engine now.", value=lambda s, _: s.running),
    Metric(
        "prompt_tokens_total",
        kind="counter",
        help="Prompt tokens of every admitted request.",
        value=_cache(lambda p: p.prefix_cache.prompt_tokens),
    ),
    Metric(
        "cached_tokens_total",
        kind="counter",
        help="Prompt tokens served from the prefix cache.",
        value=_cache(lambda p: p.prefix_cache.cached_tokens),
    ),
    Metric(
        "evicted_tokens_total",
        kind="counter",
        help="Tokens whose full KV the prefix cache evicted.",
        value=_cache(lambda p: p.prefix_cache.evicted_tokens),
    ),
    Metric(
        "swa_evicted_tokens_total",
        kind="counter",
        help="Tokens whose live SWA KV the prefix cache evicted (with their node or tombstoned).",
        value=_cache(lambda p: p.prefix_cache.swa_evicted_tokens),
    ),
    Metric(
        "swa_tombstoned_tokens_total",
        kind="counter",
        help="Tokens an eviction tombstoned: SWA KV freed, full KV kept.",
        value=_cache(lambda p: p.prefix_cache.swa_tombstoned_tokens),
    ),
    Metric(
        "cache_tokens",
        kind="gauge",
        help="Tokens whose full KV the tree holds.",
        value=_cache(lambda p: p.prefix_cache.tokens),
    ),
    Metric(
        "swa_cache_tokens",
        kind="gauge",
        help="Tokens whose SWA KV the tree holds.",
        value=_cache(lambda p: p.prefix_cache.swa_tokens),
    ),
    Metric(
        "full_used_tokens", kind="gauge", help="Full slots running requests hold.", value=_cache(lambda p: p.full.used)
    ),
    Metric(
        "swa_used_tokens", kind="gauge", help="SWA slots running requests hold.", value=_cache(lambda p: p.swa.used)
    ),
)


def render(stats: WorkerStats, pools: PoolOccupancy | None, model: str) -> str:
    """The exposition text: ``# HELP``, ``# TYPE`` and one sample per metric (labelled with the served model);
    forwards per graph path as one counter labelled by path."""
    label = model.replace("\\", "\\\\").replace('"', '\\"')
    lines = []
    for metric in METRICS:
        value = metric.value(stats, pools)
        if value is None:
            continue
        name = PREFIX + metric.name
        lines += [
            f"# HELP {name} {metric.help}",
            f"# TYPE {name} {metric.kind}",
            f'{name}{{model_name="{label}"}} {value}',
        ]
    name = PREFIX + "forwards_total"
    lines += [f"# HELP {name} Forwards per path (decode/extend x graph/eager).", f"# TYPE {name} counter"]
    lines += [f'{name}{{model_name="{label}",path="{path}"}} {n}' for path, n in sorted(stats.forward_paths.items())]
    return "\n".join(lines) + "\n"
