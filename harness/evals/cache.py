"""lm-eval's response cache for one mode of one run, keyed so a resumed run never mixes builds or servers."""

from __future__ import annotations

import hashlib
import json
import urllib.request
from pathlib import Path
from typing import Any, Mapping

from harness.evals.config import EvalConfig, ModeSpec
from harness.evals.fingerprint import weights_sha256
from harness.server.identity import code_fingerprint

IDENTITY_FIELDS = ("model", "graph_mode", "build", "max_context_len")  # of /health, where the server has them


class ServerUnreachable(RuntimeError):
    """The server answers neither /health nor /v1/models."""


def server_identity(base_url: str, timeout: float = 10.0) -> dict[str, Any]:
    """What the server at ``base_url`` says it is: model, graph mode and build from /health (the harness
    server reports all three), and the served model ids from /v1/models (any OpenAI-style server)."""
    health, models = _get_json(base_url, "/health", timeout), _get_json(base_url, "/v1/models", timeout)
    if health is None and models is None:
        raise ServerUnreachable(f"{base_url} answers neither /health nor /v1/models")
    identity: dict[str, Any] = {k: health[k] for k in IDENTITY_FIELDS if isinstance(health, dict) and k in health}
    data = models.get("data") if isinstance(models, dict) else None
    if isinstance(data, list):
        identity["served"] = sorted(
            json.dumps({k: m.get(k) for k in ("id", "max_model_len", "graph_mode", "owned_by") if k in m},
                       sort_keys=True) for m in data if isinstance(m, dict))
    return identity


def _get_json(base_url: str, path: str, timeout: float) -> Any:
    """The JSON at ``path``, or None when it cannot be read or is not JSON (SGLang's /health is empty)."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + path, timeout=timeout) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


def response_cache(config: EvalConfig, mode: ModeSpec, identity: Mapping[str, Any]) -> Path:
    """Where lm-eval keeps every completed response of this exact run (sqlite, written as it goes).

    A crashed run therefore loses nothing; ``--resume`` reuses the responses. The file name is keyed
    by everything that decides a response — checkpoint bytes, code (commit and uncommitted diff),
    graph mode, fault, items, batching, and the ``identity`` the answering server reports (see
    ``server_identity``: model, graph mode, build) — so a resumed run can never mix in another build's
    answers, nor those of another server that answered at the same URL. Without ``--resume`` the cache
    is cleared first.
    """
    key = json.dumps([weights_sha256(config.model) or str(config.model), code_fingerprint(), mode.label,
                      mode.graphs, mode.fault, mode.base_url, [s.task for s in config.suites], dict(config.limits),
                      config.batch_size, config.max_running, config.device, dict(identity)],
                     sort_keys=True, default=str)
    path = Path(config.out) / "cache" / f"{mode.label}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not config.resume:
        for old in path.parent.glob(f"{path.name}*"):
            old.unlink()
    return path
