"""What a running server says it is: engine, version, weights, flags, read from its own endpoints.

Every engine answers some of ``/health`` (the harness server: model, graph mode, build with the
weights' digest), ``/v1/models`` (any OpenAI-style server: the served ids), ``/get_server_info``
(SGLang: its version and arguments) and ``/version`` (vLLM). The raw answers key the resume cache
(answers cached from one server are never reused for another one at the same address); the typed
record (``harness.evals.results.ServedIdentity``, kept with each run) is what provenance shows and what two arms of
one comparison are checked against.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

HEALTH_FIELDS = ("model", "graph_mode", "build", "max_context_len")  # of the harness server's /health


class ServerUnreachable(RuntimeError):
    """The server answers neither /health nor /v1/models."""


def get_json(base_url: str, path: str, timeout: float = 10.0) -> Any:
    """The JSON at ``path``, or None when it cannot be read or is not JSON (SGLang's /health is empty)."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + path, timeout=timeout) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


def server_identity(base_url: str, timeout: float = 10.0) -> dict[str, Any]:
    """The raw identity: model, graph mode and build from /health where the server reports them, and the served
    model ids from /v1/models (any OpenAI-style server). ServerUnreachable when it answers neither."""
    health, models = get_json(base_url, "/health", timeout), get_json(base_url, "/v1/models", timeout)
    if health is None and models is None:
        raise ServerUnreachable(f"{base_url} answers neither /health nor /v1/models")
    identity: dict[str, Any] = {k: health[k] for k in HEALTH_FIELDS if isinstance(health, dict) and k in health}
    data = models.get("data") if isinstance(models, dict) else None
    if isinstance(data, list):
        identity["served"] = sorted(
            json.dumps(
                {k: m.get(k) for k in ("id", "max_model_len", "graph_mode", "owned_by") if k in m}, sort_keys=True
            )
            for m in data
            if isinstance(m, dict)
        )
    return identity


def server_version(base_url: str, timeout: float = 3.0) -> str:
    """What a server says its version is: SGLang answers ``/get_server_info``, vLLM ``/version``."""
    for route, label in (("/get_server_info", "sglang"), ("/version", "")):
        data = get_json(base_url, route, timeout)
        version = data.get("version") if isinstance(data, dict) else None
        if version:
            return f"{label} {version}".strip()
    return "unknown"
