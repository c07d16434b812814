"""A server someone else started (``--on-url``, a plan arm with ``url``): read, never launched or stopped."""

from __future__ import annotations

from harness.servers.base import ServerKind, ServerSpec
from harness.servers.counters import Counters, any_counters
from harness.evals.results import ServedIdentity
from harness.servers.identity import server_identity, server_version
from harness.servers.lifecycle import Command


class ExternalServer(ServerKind):
    name = "external"

    def command(self, spec: ServerSpec) -> Command:
        raise ValueError(f"an external server is not launched: give its url (arm model {spec.model})")

    def counters(self, base_url: str) -> Counters | None:
        return any_counters(base_url)

    def identity(self, base_url: str, spec: ServerSpec) -> ServedIdentity:
        raw = server_identity(base_url)
        build = raw.get("build") if isinstance(raw.get("build"), dict) else {}
        return ServedIdentity(
            engine=self.name,
            version=server_version(base_url),
            model=str(raw.get("model", spec.model)),
            weights=build.get("weights"),
            tokenizer=build.get("tokenizer"),
            flags={"graphs": raw.get("graph_mode", spec.graphs)},
            raw=raw,
        )
