"""Observe every forward an engine runs, without changing what it runs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from harness.engine import Engine, ForwardBatch
from harness.mem.kv_pool import MHATokenToKVPool

Check = Callable[[ForwardBatch, bool, object], None]


def on_every_forward(
    engine: Engine, before: Callable[[ForwardBatch, bool], object] | None = None, after: Check | None = None
) -> None:
    """Wrap ``engine.runner.forward``: ``before(batch, uses_graph)`` may return a state that
    ``after(batch, uses_graph, state)`` receives once the forward returned."""
    runner = engine.runner
    forward = type(runner).forward  # the class attribute, so an injected fault's twin is what runs

    def observed(batch: ForwardBatch) -> torch.Tensor:
        uses_graph = runner.graph_runner is not None and runner.graph_runner.can_run(
            batch, is_decode=batch.forward_mode.is_decode()
        )
        state = before(batch, uses_graph) if before else None
        out = forward(runner, batch)
        if after:
            after(batch, uses_graph, state)
        return out

    runner.forward = observed


def kv_buffers(engine: Engine) -> list[tuple[str, torch.Tensor]]:
    """Every K and V buffer of both sub-pools, named by pool kind."""
    pools: list[tuple[str, MHATokenToKVPool]] = [
        ("full", engine.runner.pool.full_kv_pool),
        ("swa", engine.runner.pool.swa_kv_pool),
    ]
    return [(kind, t) for kind, p in pools for t in (*p.k_buffer, *p.v_buffer)]


def changed_rows(before: torch.Tensor, after: torch.Tensor) -> set[int]:
    return set(torch.nonzero((before != after).flatten(1).any(1)).flatten().tolist())


@contextlib.contextmanager
def recovering(engine: Engine) -> Iterator[Engine]:
    """A run that fails midway drops whatever it left in the engine, so that a module-scoped engine
    serves the next test clean and one failure does not cascade into unrelated ones."""
    try:
        yield engine
    except BaseException:
        engine.abort_all()
        raise
