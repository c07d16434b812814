"""The CPU tape behaves like a CUDA graph: frozen Python, replayed ops, refused host syncs."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

from harness.graph.eager import EagerBackend
from harness.graph.errors import GraphCaptureError, GraphInputReplacedError
from harness.graph.tape import TapeBackend
from harness.opcount import OpCounter
from tests.mem_helpers import build_swa


def test_replay_recomputes_from_refilled_inputs_and_writes_captured_outputs():
    x = torch.zeros(4)
    w = torch.randn(4, 3)
    graph = TapeBackend().capture(lambda: torch.tanh(x @ w) * 2, static_inputs={"x": x})
    out = graph.output
    for seed in range(3):
        x.copy_(torch.randn(4, generator=torch.Generator().manual_seed(seed)))
        assert graph.replay({"x": x}) is out
        assert torch.equal(out, torch.tanh(x @ w) * 2)


def test_in_place_and_view_ops_replay_correctly():
    x = torch.zeros(8)
    acc = torch.zeros(2, 4)

    def body():
        y = x.view(2, 4)  # a view: not replayed, still aliases x
        acc.add_(y.t().t())  # in-place accumulate
        z = y.transpose(0, 1).contiguous()
        z.mul_(2)
        return z

    graph = TapeBackend().capture(body, static_inputs={"x": x})
    acc.zero_()
    x.copy_(torch.arange(8.0))
    graph.replay()
    graph.replay()
    assert torch.equal(acc, 2 * torch.arange(8.0).view(2, 4))
    assert torch.equal(graph.output, 2 * torch.arange(8.0).view(2, 4).t())


def test_ops_without_an_out_overload_are_computed_and_copied():
    q = torch.zeros(1, 2, 3, 4)
    k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    graph = TapeBackend().capture(lambda: F.scaled_dot_product_attention(q, k, v), static_inputs={"q": q})
    q.copy_(torch.randn(1, 2, 3, 4))
    graph.replay()
    torch.testing.assert_close(graph.output, F.scaled_dot_product_attention(q, k, v))


def test_python_branch_is_frozen_at_capture():
    x = torch.ones(3)
    state = {"double": True}
    graph = TapeBackend().capture(lambda: x * 2 if state["double"] else x * 3, static_inputs={})
    state["double"] = False
    x.fill_(5)
    graph.replay()
    assert graph.output.tolist() == [10.0, 10.0, 10.0]
    eager = EagerBackend().capture(lambda: x * 2 if state["double"] else x * 3, static_inputs={})
    x.fill_(1)
    eager.replay()
    assert eager.output.tolist() == [3.0, 3.0, 3.0]


def _memo_body(pool, loc):
    return lambda: pool.translate_loc_from_full_to_swa(loc) + 0


def test_warm_memo_is_frozen_into_the_tape_seed_25824():
    """Warm-up fills the memo; capture hits it, so the gather is never recorded and replays reuse stale slots."""
    pool, allocator = build_swa(size=16, size_swa=8)
    loc = allocator.alloc(3).clone()
    body = _memo_body(pool, loc)
    body()  # warm-up fills the memo
    graph = TapeBackend().capture(body, static_inputs={"loc": loc})
    with OpCounter(reads={"mapping": allocator.full_to_swa_index_mapping}) as ops:
        graph.replay()
    assert ops.reads["mapping"] == 0  # no gather in the graph
    stale = graph.output.clone()
    allocator.free_swa(loc)  # the mapping changes: these tokens left the window
    graph.replay()
    assert torch.equal(graph.output, stale) and stale.tolist() != [0, 0, 0]


def test_invalidating_before_capture_records_the_gather():
    pool, allocator = build_swa(size=16, size_swa=8)
    loc = allocator.alloc(3).clone()
    body = _memo_body(pool, loc)
    body()
    pool.invalidate_loc_cache()
    graph = TapeBackend().capture(body, static_inputs={"loc": loc})
    with OpCounter(reads={"mapping": allocator.full_to_swa_index_mapping}) as ops:
        graph.replay()
    assert ops.reads["mapping"] == 1
    allocator.free_swa(loc)
    graph.replay()
    assert graph.output.tolist() == [0, 0, 0]


x_ = torch.tensor([1.0, -2.0, 3.0])


@pytest.mark.parametrize(
    "body, op",
    [
        (lambda: x_.sum().item(), "_local_scalar_dense"),
        (lambda: int(x_[0]), "_local_scalar_dense"),
        (lambda: bool(x_[0] > 0), "_local_scalar_dense"),
        (lambda: x_.nonzero(), "nonzero"),
        (lambda: torch.where(x_ > 0), "nonzero"),
        (lambda: x_[x_ > 0], "boolean-mask"),
        (lambda: x_.masked_select(x_ > 0), "masked_select"),
        (lambda: torch.unique(x_), "unique"),
        (lambda: torch.repeat_interleave(torch.tensor([1, 2])), "repeat_interleave"),
        (lambda: x_.tolist(), "tolist"),
        (lambda: x_.numpy(), "numpy"),
    ],
)
def test_host_sync_ops_raise_naming_the_op(body, op):
    with pytest.raises(GraphCaptureError, match=op):
        TapeBackend().capture(body, static_inputs={})
    assert torch.Tensor.tolist(torch.ones(1)) == [1.0]  # the capture-time guard is removed again


def test_a_capture_refuses_host_reads_on_its_own_thread_only():
    """A server capturing lazily (``--capture lazy``) captures on its engine thread while its HTTP threads turn
    finished requests into JSON: their ``.tolist()`` is no host sync of the graph and must work (found by the logprob
    calibration: a concurrent request's logprobs failed with HTTP 500). The capturing thread is still refused."""
    inside, release, seen = threading.Event(), threading.Event(), {}

    def body():
        inside.set()
        release.wait(timeout=30)
        try:
            torch.ones(2).tolist()
        except GraphCaptureError as refused:
            seen["capture"] = str(refused)
        return torch.ones(1)

    capturing = threading.Thread(target=lambda: TapeBackend().capture(body, static_inputs={}))
    capturing.start()
    assert inside.wait(timeout=30)
    try:
        seen["other"] = torch.arange(3).tolist()  # another thread, while the capture is open
    finally:
        release.set()
        capturing.join(timeout=30)
    assert seen["other"] == [0, 1, 2]
    assert "tolist" in seen.get("capture", ""), seen  # the capturing thread's own read is still refused
    assert torch.Tensor.tolist(torch.ones(1)) == [1.0]


def test_replay_after_an_input_was_replaced_is_an_error():
    buffers = {"x": torch.zeros(3)}
    graph = TapeBackend().capture(lambda: buffers["x"] + 1, static_inputs=buffers)
    buffers["x"].copy_(torch.ones(3))
    graph.replay(buffers)  # refilled in place: fine
    buffers["x"] = torch.ones(3)  # replaced: the graph would still read the old tensor
    with pytest.raises(GraphInputReplacedError, match="'x' was replaced"):
        graph.replay(buffers)
