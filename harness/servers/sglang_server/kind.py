"""SGLang's server as an engine: graphs on is its default (CUDA graphs for decode), graphs off disables the
decode and prefill graph backends. On CPU (an arm whose flags say ``--device cpu``) and for a fault arm the
server runs through ``patched_server``, which installs the CPU stand-ins (``shims/``) and/or patches an
SGLang-side catalog fault into every process of the server. ``refused_flags`` checks an arm's flags with SGLang's own
parser (``check_arm``, below), so that a plan refuses them before anything starts."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from harness.servers.base import ServerKind, ServerSpec, environment_cache
from harness.servers.counters import SGLANG_METRICS, Counters, metrics_reader, metrics_stats
from harness.servers.lifecycle import Command
from harness.servers.sglang_server import eviction_ledger  # a submodule: imports nothing of this package
from harness.env import SGLANG_FAULT_ENV, SGLANG_PATCH_ENV
from harness.targets.preflight import SGLANG_SERVER

# Its Prometheus counters kept with each run (``--enable-metrics``), under the names every server kind uses.
STATS = {
    "sglang:num_requests_total": "requests",
    "sglang:generation_tokens_total": "generated_tokens",
    "sglang:prompt_tokens_total": "prefix_cache_query_tokens",
    "sglang:cached_tokens_total": "prefix_cache_hit_tokens",
    "sglang:evicted_tokens_total": "prefix_cache_evicted_tokens",  # the tree's device evictions (a counter)
    "sglang:swa_evictable_tokens": "prefix_cache_swa_evictable_tokens",  # a gauge: what the tree holds at the end
}
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}  # without it ``--device cpu`` still takes non-CPU import paths
# The flags a CPU arm needs: SGLang's plain-PyTorch attention and sampling, fp32 as the harness compares in, and a
# KV budget (left to itself SGLang sizes its pools from the machine's memory: 14 GB on a 24 GB box).
CPU_FLAGS = (
    "--device",
    "cpu",
    "--attention-backend",
    "torch_native",
    "--sampling-backend",
    "pytorch",
    "--dtype",
    "float32",
    "--max-total-tokens",
    "65536",
)
# Decode batch sizes the CPU graph runner compiles when graphs are on (about a minute each on 2 cores); a batch
# larger than the largest runs eager, as SGLang's own runner decides.
CPU_GRAPH_BS = ("1", "2", "4", "8")

SGLANG_LAUNCH = ("python", "-m", "sglang.launch_server")
PATCHED_LAUNCH = ("python", "-m", "harness.servers.sglang_server.patched_server")
GRAPHS_OFF_FLAGS = ("--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled")


def graph_flags(graphs: str, flags: tuple[str, ...] = ()) -> tuple[str, ...]:
    """GPU: CUDA graphs are SGLang's default, off disables them. CPU: no graphs is the default, on is its CPU graph
    runner (torch.compile of decode at CPU_GRAPH_BS, unless the arm's flags name batch sizes themselves)."""
    if graphs not in ("on", "off"):
        raise ValueError(f"SGLang arms are graphs on or off, not {graphs!r}")
    if on_cpu(flags):
        if graphs == "off":
            return ()
        return (
            "--enable-torch-compile",
            *(() if "--cuda-graph-bs-decode" in flags else ("--cuda-graph-bs-decode", *CPU_GRAPH_BS)),
        )
    return GRAPHS_OFF_FLAGS if graphs == "off" else ()


def sglang_args(spec: ServerSpec) -> tuple[str, ...]:
    """The flags SGLang's own parser sees (what ``ServerArgs`` must accept)."""
    return (
        "--model-path",
        spec.model,
        "--served-model-name",
        spec.served_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(spec.port),
        "--random-seed",
        "0",
        "--enable-metrics",
        "--enable-cache-report",  # usage.prompt_tokens_details.cached_tokens: the prefix cache's hits per request
        # On CPU an idle scheduler polls its sockets in a busy loop, a whole core of two: a server kept for a test
        # module, or one waiting for lm-eval, slowed every process beside it. This one waits on the sockets instead.
        *(("--sleep-on-idle",) if on_cpu(spec.flags) else ()),
        *spec.flags,
        *graph_flags(spec.graphs, spec.flags),
    )


class SGLangServer(ServerKind):
    name = "sglang"
    stop_grace_s = 60.0
    # SGLang's own counters for lookups, hits and full-layer evictions; its SWA evictions and tombstones counted by
    # the eviction ledger the patched server (every CPU arm) installs in its scheduler (``eviction_ledger``).
    cache_metrics = {
        "query_tokens": "sglang:prompt_tokens_total",
        "hit_tokens": "sglang:cached_tokens_total",
        "evicted": "sglang:evicted_tokens_total",
        "swa_evicted": eviction_ledger.SWA + "_total",
        "tombstoned": eviction_ledger.TOMBSTONED + "_total",
    }
    # The server, not only the memory code the suites import: its HTTP stack and its kernel package.
    required_modules = ("sglang", "uvicorn", "fastapi", "xgrammar")
    install_hint = "nox -s sglang_server installs its CPU serving recipe (nox -s sglang has its memory code only)"
    start_imports = SGLANG_SERVER

    def graph_flags(self, graphs: str, flags: tuple[str, ...] = ()) -> tuple[str, ...]:
        return graph_flags(graphs, flags)

    def refused_flags(self, spec: ServerSpec, expect: Mapping[str, Any]) -> str | None:
        """Its flags through SGLang's own parser (SGLang must import), and the ``ServerArgs`` fields ``expect``
        names (the nightly's arms say which fields their flags set)."""
        try:
            check_arm(sglang_args(spec), expect, sglang_parser())
        except InvalidServerArgs as exc:
            return str(exc)
        return None

    def counters(self, base_url: str) -> Counters | None:
        """Its Prometheus counters (every arm is started with ``--enable-metrics``, which changes no answer)."""
        return metrics_reader(*SGLANG_METRICS)(base_url)

    def stats(self, base_url: str) -> dict[str, Any]:
        """Its Prometheus counters over the run: requests, tokens, and the prefix cache's prompt tokens and hits."""
        return metrics_stats(base_url, STATS)

    @staticmethod
    def cpu_env() -> dict[str, str]:
        """A CPU server's environment: SGLang's CPU engine, and torch.compile's cache (the CPU graph runner's inductor
        code) in this venv rather than torch's /tmp default, which every venv and parallel job would share."""
        return {**CPU_ENV, "TORCHINDUCTOR_CACHE_DIR": str(environment_cache("inductor"))}

    def command(self, spec: ServerSpec) -> Command:
        cpu = on_cpu(spec.flags)
        env = {**(self.cpu_env() if cpu else {}), **spec.env}
        if spec.fault:
            return Command(
                (*PATCHED_LAUNCH, "--fault", spec.fault, "--", *sglang_args(spec)),
                {**env, SGLANG_FAULT_ENV: spec.fault},
            )
        if cpu or SGLANG_PATCH_ENV in env:  # the CPU stand-ins, or a source patch (patched_server applies both)
            return Command((*PATCHED_LAUNCH, "--", *sglang_args(spec)), env)
        return Command((*SGLANG_LAUNCH, *sglang_args(spec)), env)


def on_cpu(flags: tuple[str, ...]) -> bool:
    """The arm runs SGLang's CPU engine (``--device cpu``, in either spelling)."""
    return "--device=cpu" in flags or any(a == "--device" and b == "cpu" for a, b in zip(flags, flags[1:]))


# -- its flags through SGLang's own parser -------------------------------------------------------------------------
# Parse an arm's server flags with SGLang's own command-line parser, on any machine with SGLang installed.
#
# ``sglang.launch_server`` builds its parser as ``ServerArgs.add_cli_args(argparse.ArgumentParser())``
# and turns the namespace into a ``ServerArgs`` record with ``ServerArgs.from_cli_args``; both run on
# CPU (the SGLang target's install, ``nox -s sglang``). Resolution (``resolve_once``: the model's
# config from the hub, the GPU, memory sizing) is the server's start-up and is not run here.
#
# The parser here differs from SGLang's in one respect: an error raises :class:`InvalidServerArgs`
# instead of printing the usage and exiting, and a deprecated spelling (``--disable-cuda-graph``) is
# reported, so a plan can refuse flags that only parse with a warning.


class InvalidServerArgs(ValueError):
    """SGLang's parser refused the flags (unknown flag, bad value, bad choice)."""


@dataclass(frozen=True)
class ParsedServerArgs:
    server_args: Any  # sglang.srt.server_args.ServerArgs
    deprecated: tuple[str, ...]  # deprecated flags the argv used

    def field(self, name: str) -> Any:
        return getattr(self.server_args, name)


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise InvalidServerArgs(message)


def sglang_parser() -> argparse.ArgumentParser:
    """SGLang's server parser (needs ``sglang`` importable: on CPU, ``load_target("sglang")`` first)."""
    from sglang.srt.server_args import ServerArgs

    parser = _RaisingParser(prog="sglang.launch_server", exit_on_error=False, add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


def parse_server_args(argv: Sequence[str], parser: argparse.ArgumentParser | None = None) -> ParsedServerArgs:
    """``argv`` (the flags after ``python -m sglang.launch_server``) as SGLang's ``ServerArgs``."""
    from sglang.srt.server_args import ServerArgs

    parser = parser or sglang_parser()
    try:
        namespace = parser.parse_args(list(argv))
    except argparse.ArgumentError as exc:  # exit_on_error=False routes some errors here instead of error()
        raise InvalidServerArgs(str(exc)) from None
    deprecated = tuple(
        token
        for token in argv
        if token.startswith("--")
        and type(parser._option_string_actions.get(token.split("=", 1)[0])).__name__.startswith("Deprecated")
    )
    try:
        record = ServerArgs.from_cli_args(namespace)
    except (TypeError, ValueError) as exc:
        raise InvalidServerArgs(f"ServerArgs refused the parsed flags: {exc}") from exc
    return ParsedServerArgs(record, deprecated)


def check_arm(
    argv: Sequence[str],
    expect: Mapping[str, Any],
    parser: argparse.ArgumentParser | None = None,
    *,
    allow_deprecated: bool = False,
) -> ParsedServerArgs:
    """Parse ``argv`` and check that it set every ``expect`` field; raises :class:`InvalidServerArgs`."""
    parsed = parse_server_args(argv, parser)
    if parsed.deprecated and not allow_deprecated:
        raise InvalidServerArgs(f"deprecated flag(s) {', '.join(parsed.deprecated)}: use the current spelling")
    wrong = {name: parsed.field(name) for name, value in expect.items() if parsed.field(name) != value}
    if wrong:
        raise InvalidServerArgs(f"flags {' '.join(argv)} did not set {dict(expect)}: ServerArgs has {wrong}")
    return parsed
