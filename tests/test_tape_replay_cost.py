"""The tape's cheap replay keeps its semantics: bound steps dispatch the recorded overloads, constants
are dropped only when nothing writes their output again, random ops are always replayed."""

from __future__ import annotations

from collections import Counter

import torch
import torch.nn.functional as F

from harness.graph.piecewise import graph_break
from harness.graph.tape import TapeBackend
from harness.opcount import OpCounter


def _body(x: torch.Tensor, w: torch.Tensor, idx: torch.Tensor, cache: torch.Tensor):
    def body():
        h = F.linear(x, w)  # mm (+ t view)
        s = torch.tanh(h / 3.0) * 3.0 + 1e-6
        g = F.gelu(s, approximate="tanh") * s.pow(2).mean(-1, keepdim=True).rsqrt()
        cache.index_put_((idx,), g)  # a mutating step
        rows = cache.index_select(0, idx)
        probs = torch.softmax(torch.bmm(rows[None], rows[None].transpose(1, 2)), -1)  # no torch.* binding
        offsets = torch.arange(-3, 0, dtype=torch.int64)  # a constant
        return probs, torch.cat([rows, g]).sum(0) + (idx[:, None] + offsets).lt(2).float().sum()

    return body


def test_bound_steps_dispatch_exactly_the_recorded_overloads_and_values():
    x, w = torch.randn(3, 8), torch.randn(8, 8)
    idx, cache = torch.tensor([4, 1, 6]), torch.zeros(8, 8)
    body = _body(x, w, idx, cache)
    graph = TapeBackend().capture(body, static_inputs={"x": x})
    recorded = Counter(str(step.func.overloadpacket) for step in graph._steps
                       if isinstance(step.func, torch._ops.OpOverload))
    for seed in range(3):
        x.copy_(torch.randn(3, 8, generator=torch.Generator().manual_seed(seed)))
        with OpCounter() as ops:
            graph.replay({"x": x})
        for packet, n in recorded.items():
            assert ops.counts[packet] == n, (packet, dict(ops.counts))
        want = body()
        for got, expected in zip(graph.output, want):
            torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_constant_steps_are_dropped_unless_something_writes_their_output():
    x = torch.zeros(3)

    def only_read():
        return x + torch.arange(3.0)

    def written_later():
        base = torch.arange(3.0)
        base.add_(x)  # the constant's output is written in the graph: it must be rebuilt every replay
        return base * 2

    read = TapeBackend().capture(only_read, static_inputs={"x": x})
    written = TapeBackend().capture(written_later, static_inputs={"x": x})
    assert read.num_steps == 1 and written.num_steps == 3
    for value in (1.0, 5.0):
        x.fill_(value)
        assert torch.equal(read.replay(), x + torch.arange(3.0))
        assert torch.equal(written.replay(), (torch.arange(3.0) + x) * 2)


def test_a_constant_returned_as_the_output_is_kept():
    graph = TapeBackend().capture(lambda: torch.arange(4.0), static_inputs={})
    graph.output.zero_()  # the caller owns the output between replays
    assert graph.num_steps == 1 and torch.equal(graph.replay(), torch.arange(4.0))


def test_random_ops_are_never_constants():
    graph = TapeBackend().capture(lambda: torch.randn(64) + 0, static_inputs={})
    first = graph.replay().clone()
    assert graph.num_steps == 2 and not torch.equal(graph.replay(), first)


def test_a_constant_a_break_may_write_is_rebuilt_every_replay():
    """A break's Python may write its inputs in place, so a constant it reads is no constant."""
    x = torch.zeros(3)

    def bump(t: torch.Tensor) -> torch.Tensor:
        t.add_(1.0)
        return t * 1

    def body():
        base = torch.arange(3.0)
        return graph_break(bump, base) + x

    graph = TapeBackend().capture_piecewise(body, static_inputs={"x": x})
    for value in (1.0, 5.0):
        x.fill_(value)
        assert torch.equal(graph.replay(), torch.arange(3.0) + 1 + value)
