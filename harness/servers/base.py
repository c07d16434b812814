"""A server kind serves one arm of an accuracy job over an OpenAI-compatible endpoint.

Each kind says whether it can start here (installed, its start-up imports importable) and whether its own parser
takes an arm's flags, the command line of a server for a ``ServerSpec`` (graphs on, off, a stress arm's flags), where
that server will listen, how to read its identity and how long it may take to stop; ``start`` runs it through the one
lifecycle of ``harness.servers.lifecycle``. Server kinds know nothing of plans, lm-eval or reports.
"""

from __future__ import annotations

import http.client
import importlib.util
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from harness.servers.counters import CacheCounters, CacheMetrics, Counters, cache_counters
from harness.servers.guard import CHILDREN, ChildProcesses
from harness.evals.results import ServedIdentity
from harness.servers.identity import get_json, server_identity, server_version
from harness.servers.lifecycle import Command, ServerProcess, launch
from harness.reuse import tokenizer_fingerprint, weights_fingerprint
from harness.targets.preflight import Needs, unimportable


def environment_cache(name: str) -> Path:
    """A compile cache of this environment (servers run on this interpreter; caches are never shared between venvs,
    so parallel jobs never share their locks), relative to the checkout where it lies inside it (servers run in the
    checkout; plans say no machine's paths)."""
    from harness.paths import REPO

    root = Path(sys.prefix) / "share" / "swa-harness" / name
    return root.relative_to(REPO) if root.is_relative_to(REPO) else root


# The prefix cache's counters, one name for every server kind (vLLM's own names; SGLang's and the harness's mapped):
# prompt tokens it was asked for and, of them, tokens it served. The harness server also says what its tree holds.
PREFIX_CACHE_STATS = ("prefix_cache_query_tokens", "prefix_cache_hit_tokens")
HEALTH_PREFIX_CACHE = {
    "prompt_tokens": "prefix_cache_query_tokens",
    "cached_tokens": "prefix_cache_hit_tokens",
    "tokens": "prefix_cache_tokens_held",
    "swa_tokens": "prefix_cache_swa_tokens_held",
    "evicted_tokens": "prefix_cache_evicted_tokens",
    "swa_evicted_tokens": "prefix_cache_swa_evicted_tokens",
}


class CacheFlushRefused(RuntimeError):
    """The server would not empty its prefix cache (refused, timed out, or has no way to); one line naming it."""


@dataclass(frozen=True)
class ServerSpec:
    """What one arm asks of its engine: a model, a graph mode, extra flags and variables, maybe a fault."""

    model: str  # a checkpoint folder, or a hub id where the engine fetches weights itself
    served_name: str  # the ``model`` clients send
    graphs: str = "on"  # "on" | "off", or an engine's own mode name (the harness server: tape, cuda, auto, eager)
    flags: tuple[str, ...] = ()  # appended to the engine's command line
    env: Mapping[str, str] = field(default_factory=dict)
    fault: str | None = None  # a catalog fault of this engine, injected into this server only
    port: int = 0  # 0: the server picks one and reports it (engines that can)
    url: str | None = None  # an external server: nothing is launched


class ServerKind:
    """The base every server kind refines; the defaults fit an OpenAI-compatible server with a fixed port."""

    name = "engine"
    stop_grace_s = 30.0  # SIGTERM -> SIGKILL
    health_path = "/health"
    required_modules: tuple[str, ...] = ()
    # Where the server empties its prefix cache (POST), as SGLang's and the harness's; None: it has no way to.
    flush_path: str | None = "/flush_cache"
    install_hint = ""
    start_imports: Needs | None = None  # what its server imports at start-up, tried before a job starts
    # CacheCounters field -> the Prometheus metric this server serves it under at /metrics; {} where it serves none.
    cache_metrics: CacheMetrics = {}

    def missing(self) -> str | None:
        """Why this engine cannot run here, in one line; None when it can."""
        absent = [m for m in self.required_modules if importlib.util.find_spec(m) is None]
        if not absent:
            return None
        return f"engine {self.name} is not installed (missing {', '.join(absent)})" + (
            f"; {self.install_hint}" if self.install_hint else ""
        )

    def cannot_start(self) -> str | None:
        """Why no server of this kind can start here, in one line: a module it needs is not installed, or what it
        imports at start-up (``start_imports``) fails to import in a subprocess of this python (a server that would
        die at start-up, read as a run that failed). None when it can."""
        return self.missing() or (unimportable(self.start_imports) if self.start_imports else None)

    def refused_flags(self, spec: ServerSpec, expect: Mapping[str, Any]) -> str | None:
        """Why this engine's own parser refuses the flags of ``spec``, or leaves a field of ``expect`` unset, in one
        line; None when they pass, or the engine has no parser the harness can ask."""
        return None

    def graph_flags(self, graphs: str, flags: tuple[str, ...] = ()) -> tuple[str, ...]:
        """The flags that set graph mode ``graphs`` on this engine's command line (``flags``: the arm's others,
        which may say which device the mode is for)."""
        return ()

    def command(self, spec: ServerSpec) -> Command:
        raise NotImplementedError

    def url(self, spec: ServerSpec) -> str | None:
        """Where the server will listen; None when it picks its port and prints it."""
        return spec.url or (f"http://127.0.0.1:{spec.port}" if spec.port else None)

    def url_from_line(self, line: str) -> str | None:
        return None

    def start(
        self,
        spec: ServerSpec,
        *,
        log_path: Path,
        timeout: float,
        python: str = sys.executable,
        children: ChildProcesses = CHILDREN,
    ) -> ServerProcess:
        """Launch the server for ``spec`` and return once it answers (ServerLaunchError otherwise)."""
        return launch(
            self.command(spec),
            log_path=log_path,
            timeout=timeout,
            url=self.url(spec),
            url_from_line=self.url_from_line,
            health_path=self.health_path,
            python=python,
            grace_s=self.stop_grace_s,
            children=children,
        )

    def flush_cache(self, base_url: str, timeout: float = 120.0) -> None:
        """Empty the server's prefix cache, so the next request is served as on a fresh server. Servers refuse while
        requests are in flight (SGLang 400, the harness 409, vLLM ``success: false``), so a refusal is asked again
        until ``timeout``; CacheFlushRefused (one line: the server, the endpoint, its last answer) after that."""
        if self.flush_path is None:
            raise CacheFlushRefused(f"the {self.name} server has no endpoint that empties its prefix cache")
        url, deadline, last = base_url.rstrip("/") + self.flush_path, time.monotonic() + timeout, "no answer"
        while True:
            try:
                ask = urllib.request.Request(
                    url, data=b"{}", headers={"Content-Type": "application/json"}, method="POST"
                )
                with urllib.request.urlopen(ask, timeout=max(1.0, deadline - time.monotonic())) as resp:
                    if self.flushed(resp.read()):
                        return
                    last = "it answered that it did not flush"
            except urllib.error.HTTPError as exc:
                last = f"HTTP {exc.code}: {exc.read()[:120].decode(errors='replace').strip()}"
                if exc.code not in (400, 409, 503):  # not "busy, ask again": it will answer the same
                    raise CacheFlushRefused(
                        f"the {self.name} server at {base_url} refused POST {self.flush_path} ({last})"
                    )
            except (OSError, http.client.HTTPException) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise CacheFlushRefused(
                    f"the {self.name} server at {base_url} did not empty its prefix cache within {timeout:g} s "
                    f"(POST {self.flush_path}; {last})"
                )
            time.sleep(0.2)

    def flushed(self, body: bytes) -> bool:
        """Whether a 200 from ``flush_path`` says the cache was emptied (SGLang answers text, the harness JSON)."""
        return True

    def counters(self, base_url: str) -> Counters | None:
        """Requests finished and tokens generated so far, for the live progress; None where it exposes none."""
        return None

    def cache_counters(self, base_url: str) -> CacheCounters | None:
        """Its prefix cache's counters from its own ``/metrics``, read the same way on every kind of server; None
        where it serves none (or did not answer)."""
        return cache_counters(base_url, self.cache_metrics) if self.cache_metrics else None

    def stats(self, base_url: str) -> dict[str, Any]:
        """What the server did over a run, read once before it stops and kept with the run's results (the harness
        server: forwards per graph path and tokens, and its prefix cache's prompt tokens, hits and what it holds,
        from ``/health``, under the names every kind uses: ``PREFIX_CACHE_STATS``); {} where it says nothing."""
        health = get_json(base_url, "/health", timeout=5)
        stats = health.get("stats") if isinstance(health, dict) else None
        if not isinstance(stats, dict):
            return {}
        pools = health.get("pools")
        cache = pools.get("prefix_cache") if isinstance(pools, dict) else None
        held = (
            {short: cache[n] for n, short in HEALTH_PREFIX_CACHE.items() if cache.get(n) is not None} if cache else {}
        )
        return {**stats, **held}

    def identity(self, base_url: str, spec: ServerSpec) -> ServedIdentity:
        """What the server at ``base_url`` reports; ServerUnreachable when it answers nothing."""
        raw = server_identity(base_url)
        local = Path(spec.model)
        return ServedIdentity(
            engine=self.name,
            version=server_version(base_url),
            model=spec.model,
            weights=weights_fingerprint(local) if local.is_dir() else None,
            tokenizer=tokenizer_fingerprint(local) if local.is_dir() else None,
            flags={"graphs": spec.graphs, "flags": " ".join(spec.flags)},
            raw=raw,
        )
