"""The engines an arm can name."""

from __future__ import annotations

from harness.servers.base import ServerKind
from harness.servers.external import ExternalServer
from harness.servers.harness_server import HarnessServer
from harness.servers.sglang_server import SGLangServer
from harness.servers.vllm import VLLMServer

SERVER_KINDS: dict[str, ServerKind] = {
    e.name: e for e in (HarnessServer(), SGLangServer(), VLLMServer(), ExternalServer())
}


def get_server_kind(name: str) -> ServerKind:
    try:
        return SERVER_KINDS[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(SERVER_KINDS)}") from None
