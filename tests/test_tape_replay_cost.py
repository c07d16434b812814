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
    recorded = Counter(
        str(step.func.overloadpacket) for step in graph._steps if isinstance(step.func, torch._ops.OpOverload)
    )
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


def _steps_by_op(graph) -> Counter:
    return Counter(str(step.func) for step in graph._steps)


def test_number_operands_and_masked_fill_are_substituted_with_the_same_bits():
    """fp32/int64 ops on a Python number replay with a 0-dim tensor, masked_fill as where; values equal bit
    for bit, NaN, infinities, signed zeros and out-of-range fills included."""
    special = torch.tensor([0.0, -0.0, 1.0, -1.5, 3.4e38, -3.4e38, 1e-45, float("inf"), float("-inf"), float("nan")])
    x = torch.cat([special, torch.randn(54, generator=torch.Generator().manual_seed(0))])
    n = torch.arange(-32, 32)
    m = torch.arange(-32, 32, dtype=torch.int32)

    def body():
        scaled = (x / 0.1767766952966369 + 2.5) * 3 - 1e-3
        masked = scaled.masked_fill(x > 1.0, float("-inf")).masked_fill(n.ge(5), 0.0)
        return masked, n * 3 + 7, (n + 2.0) / 3, n < 4, x != 0.5, m * 70000 - 5, m >= -3, m / 7, m + 2**40

    graph = TapeBackend().capture(body, static_inputs={"x": x, "n": n, "m": m})
    ops = _steps_by_op(graph)
    assert ops["aten.where.self_out"] == 2 and "aten.masked_fill.Scalar_out" not in ops
    assert ops["aten.lt.Tensor_out"] == 1 and ops["aten.ne.Tensor_out"] == 1 and ops["aten.ge.Tensor_out"] == 2
    for seed in range(3):
        fresh = torch.randn(64, generator=torch.Generator().manual_seed(seed + 1)) * 10
        x.copy_(torch.cat([special, fresh[:54]]))
        n.copy_(torch.randint(-100, 100, (64,), generator=torch.Generator().manual_seed(seed)))
        m.copy_(
            torch.randint(-(2**31), 2**31 - 1, (64,), generator=torch.Generator().manual_seed(seed), dtype=torch.int32)
        )
        for got, want in zip(graph.replay({"x": x, "n": n, "m": m}), body()):
            assert got.dtype == want.dtype
            assert torch.equal(
                got.view(torch.int32) if got.is_floating_point() else got,
                want.view(torch.int32) if want.is_floating_point() else want,
            )


def test_reduced_precision_number_operands_are_not_substituted():
    """A bf16 op reads a Python number in fp32; a bf16 0-dim tensor would round it first, so it stays."""
    x = torch.randn(16, dtype=torch.bfloat16)
    graph = TapeBackend().capture(lambda: x * 0.1 + 3, static_inputs={"x": x})
    steps = [step for step in graph._steps if str(step.func) in ("aten.mul.out", "aten.add.out")]
    assert len(steps) == 2 and all(not any(isinstance(a, torch.Tensor) and a.dim() == 0 for a in s.args) for s in steps)
    x.copy_(torch.randn(16, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(3)))
    assert not torch.equal(x * 0.1, x * torch.tensor(0.1, dtype=torch.bfloat16))  # why: the rounding differs
    assert torch.equal(graph.replay({"x": x}).view(torch.int16), (x * 0.1 + 3).view(torch.int16))
