"""What an SGLang server's radix cache evicted, counted in its scheduler process and served on its ``/metrics``.

SGLang counts the full-layer tokens an eviction frees (``sglang:evicted_tokens_total``; "report full-layer tokens
only", says its ``_evict``) and keeps SWA state only as gauges, so a suite cannot read from SGLang alone that its
tree evicted SWA KV or tombstoned a node under pressure. ``install`` wraps ``UnifiedRadixCache._evict``, which every
eviction path goes through (``evict``, ``evict_for_alloc``), and measures each call on the tree's own slots before
and after (``harness.mem.eviction.Evicted.between``), returning what SGLang returned, unchanged. The counts go to
Prometheus counters in the scheduler process; SGLang's metrics run in prometheus_client's multiprocess mode, so its
HTTP process serves them beside its own, under ``swa_harness:sglang_*`` (never under SGLang's names).

``patched_server`` installs it in every process of a server it launches; only the scheduler builds a cache.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

# Prometheus names (prometheus_client adds ``_total`` to a counter's samples).
FULL, SWA, TOMBSTONED = (
    "swa_harness:sglang_evicted_tokens",
    "swa_harness:sglang_swa_evicted_tokens",
    "swa_harness:sglang_swa_tombstoned_tokens",
)
_counters: dict[str, Any] = {}


def _counter(name: str) -> Any:
    """Made in the spawned scheduler, which inherits SGLang's multiprocess folder from the launcher."""
    if name not in _counters:
        from prometheus_client import Counter

        _counters[name] = Counter(name, f"{name.split(':')[1]}: measured on the tree around each eviction")
    return _counters[name]


def install() -> None:
    """Wrap ``UnifiedRadixCache._evict`` once in this process (a catalog fault that edits it swaps its code,
    which the wrapper still calls). Nothing where prometheus_client is absent: no SGLang server runs there (the
    memory-only venv's ``--self-check`` spawns a child without one)."""
    if importlib.util.find_spec("prometheus_client") is None:
        return
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache

    from harness.mem.eviction import Evicted
    from harness.targets.sglang.prefix_cache import unified_tree_slots

    original = UnifiedRadixCache._evict
    if getattr(original, "_swa_harness_ledger", False):
        return
    for name in (FULL, SWA, TOMBSTONED):
        _counter(name)  # at 0 from the start: a pool that never evicted reads 0, not "no such metric"

    @functools.wraps(original)
    def _evict(self: Any, *args: Any, **kwargs: Any) -> Any:
        swa = bool(self.supports_swa())
        before = unified_tree_slots(self, swa=swa)
        result = original(self, *args, **kwargs)
        took = Evicted.between(before, unified_tree_slots(self, swa=swa))
        for name, n in ((FULL, took.full), (SWA, took.swa), (TOMBSTONED, took.tombstoned)):
            if n:
                _counter(name).inc(n)
        return result

    _evict._swa_harness_ledger = True  # type: ignore[attr-defined]
    UnifiedRadixCache._evict = _evict
