"""SGLang's server as an engine: graphs on is its default (CUDA graphs for decode), graphs off disables the
decode and prefill graph backends; a fault arm runs ``patched_server``, which patches an SGLang-side catalog
fault into every process of the server. ``server_args`` checks an arm's flags with SGLang's own parser."""

from __future__ import annotations

from harness.engines.base import Engine, ServerSpec
from harness.engines.lifecycle import Command
from harness.env import SGLANG_FAULT_ENV

SGLANG_LAUNCH = ("python", "-m", "sglang.launch_server")
PATCHED_LAUNCH = ("python", "-m", "harness.engines.sglang.patched_server")
GRAPHS_OFF_FLAGS = ("--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled")


def graph_flags(graphs: str) -> tuple[str, ...]:
    if graphs not in ("on", "off"):
        raise ValueError(f"SGLang arms are graphs on or off, not {graphs!r}")
    return GRAPHS_OFF_FLAGS if graphs == "off" else ()


def sglang_args(spec: ServerSpec) -> tuple[str, ...]:
    """The flags SGLang's own parser sees (what ``ServerArgs`` must accept)."""
    return ("--model-path", spec.model, "--served-model-name", spec.served_name, "--host", "127.0.0.1", "--port",
            str(spec.port), "--random-seed", "0", *spec.flags, *graph_flags(spec.graphs))


class SGLangEngine(Engine):
    name = "sglang"
    stop_grace_s = 60.0
    # The server, not only the memory code the suites import: its HTTP stack and its kernel package.
    required_modules = ("sglang", "uvicorn", "fastapi", "sgl_kernel")
    install_hint = "the SGLang suites' venv (nox -s sglang) has its memory code only, not its server"

    def graph_flags(self, graphs: str) -> tuple[str, ...]:
        return graph_flags(graphs)

    def command(self, spec: ServerSpec) -> Command:
        if spec.fault:
            return Command((*PATCHED_LAUNCH, "--fault", spec.fault, "--", *sglang_args(spec)),
                           {**spec.env, SGLANG_FAULT_ENV: spec.fault})
        return Command((*SGLANG_LAUNCH, *sglang_args(spec)), dict(spec.env))
