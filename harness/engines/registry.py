"""The engines an arm can name."""

from __future__ import annotations

from harness.engines.base import Engine
from harness.engines.external import ExternalEngine
from harness.engines.harness_server import HarnessEngine
from harness.engines.sglang import SGLangEngine
from harness.engines.vllm import VLLMEngine

ENGINES: dict[str, Engine] = {e.name: e for e in (HarnessEngine(), SGLangEngine(), VLLMEngine(), ExternalEngine())}


def get_engine(name: str) -> Engine:
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}") from None
