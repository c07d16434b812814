"""The SGLang server kind (``kind``) and what its servers run with: the patched launcher, its CPU graph hooks, the
eviction ledger, the trace; SGLang's own argument parser over an arm's flags is the kind's (``check_arm``)."""

from harness.servers.sglang_server.kind import (
    CPU_ENV,
    CPU_FLAGS,
    CPU_GRAPH_BS,
    GRAPHS_OFF_FLAGS,
    PATCHED_LAUNCH,
    InvalidServerArgs,
    ParsedServerArgs,
    SGLANG_LAUNCH,
    STATS,
    SGLangServer,
    check_arm,
    graph_flags,
    on_cpu,
    parse_server_args,
    sglang_args,
    sglang_parser,
)

__all__ = [
    "CPU_ENV",
    "CPU_FLAGS",
    "CPU_GRAPH_BS",
    "GRAPHS_OFF_FLAGS",
    "PATCHED_LAUNCH",
    "InvalidServerArgs",
    "ParsedServerArgs",
    "SGLANG_LAUNCH",
    "STATS",
    "SGLangServer",
    "check_arm",
    "graph_flags",
    "on_cpu",
    "parse_server_args",
    "sglang_args",
    "sglang_parser",
]
