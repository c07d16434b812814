"""Live progress of the servers, read from their ``/health`` counters while lm-eval runs."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.request


def health(base_url: str) -> dict:
    """The server's ``/health`` JSON, or ``{}`` when it cannot be read (progress must never fail a run)."""
    try:
        with urllib.request.urlopen(f"{base_url.rstrip('/')}/health", timeout=2) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return {}


class Progress:
    """Prints how many items each server has finished, every few seconds, while lm-eval runs."""

    def __init__(self, interval_s: float = 5.0) -> None:
        self.interval_s = interval_s
        self.targets: dict[str, tuple[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._start = time.perf_counter()

    def watch(self, label: str, base_url: str, total: int) -> None:
        self.targets[label] = (base_url, total)

    def unwatch(self, label: str) -> None:
        self.targets.pop(label, None)

    def __enter__(self) -> "Progress":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            parts = []
            for label, (url, total) in list(self.targets.items()):
                stats = health(url).get("stats", {})
                done = stats.get("requests_served", "?")
                parts.append(f"graphs {label}: {done}/{total} items, {stats.get('generated_tokens', '?')} tokens")
            if parts:
                print(f"[{time.perf_counter() - self._start:6.0f}s] " + " | ".join(parts), file=sys.stderr, flush=True)
