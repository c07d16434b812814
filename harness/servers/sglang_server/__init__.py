"""The SGLang server kind (``kind``) and what its servers run with: the patched launcher, its CPU graph hooks, the
eviction ledger, SGLang's own argument parser, the trace."""

from harness.servers.sglang_server.kind import (
    CPU_ENV,
    CPU_FLAGS,
    CPU_GRAPH_BS,
    GRAPHS_OFF_FLAGS,
    PATCHED_LAUNCH,
    SGLANG_LAUNCH,
    STATS,
    SGLangServer,
    graph_flags,
    on_cpu,
    sglang_args,
)

__all__ = [
    "CPU_ENV",
    "CPU_FLAGS",
    "CPU_GRAPH_BS",
    "GRAPHS_OFF_FLAGS",
    "PATCHED_LAUNCH",
    "SGLANG_LAUNCH",
    "STATS",
    "SGLangServer",
    "graph_flags",
    "on_cpu",
    "sglang_args",
]
