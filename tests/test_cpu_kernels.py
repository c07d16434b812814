"""The compiled CPU kernels against the torch ops they replace (``harness/engine/cpu_kernels.py``).

``attend_over_rows`` and ``F.gelu(approximate="tanh") * up`` are the references; the kernels must match
them on every shape path (vector body and scalar tail), keep their NaN and error behaviour, and leave
the engine's outputs where the torch ops put them.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from harness.engine.attention_backend import additive_mask, attend_over_rows, kv_head_rows
from harness.engine import cpu_kernels
from harness.engine.cpu_kernels import CpuKernels, KernelUnavailable, resolve_kernels
from harness.env import KERNEL_STORE_ENV
from harness.graph.tape import TapeBackend
from harness.model.attention_api import AttentionLayerSpec
from harness.model.dense import reference_logits
from harness.model.norm import RMSNorm
from tests.engine_helpers import make_engine
from fixtures.checkpoints import random_sequences

KERNELS = resolve_kernels("auto", device=torch.device("cpu"), dtype=torch.float32)
needs_kernels = pytest.mark.skipif(
    KERNELS.decode_attention is None, reason="the CPU kernels could not be built here (no C++ compiler?)"
)


def _attention_case(b: int, h: int, kvh: int, d: int, length: int, seed: int, cap: float | None = 50.0):
    g = torch.Generator().manual_seed(seed)
    spec = AttentionLayerSpec(
        layer_id=0, num_heads=h, num_kv_heads=kvh, head_dim=d, scaling=d**-0.5, logit_softcap=cap, sliding_window=None
    )
    slots = 200
    k_cache, v_cache = torch.randn(slots, kvh, d, generator=g) * 3, torch.randn(slots, kvh, d, generator=g)
    kv_slots = torch.randint(0, slots, (b, length), generator=g, dtype=torch.int32)
    seq_lens = torch.randint(1, length + 1, (b,), generator=g)
    hidden = torch.arange(length)[None, :] >= seq_lens[:, None]
    rows = kv_head_rows(kv_slots, torch.arange(kvh, dtype=torch.int32))
    q = torch.randn(b, h + kvh, d, generator=g)[:, :h]  # a strided view, as the model's q is
    return spec, q, k_cache, v_cache, rows, additive_mask(hidden)


def _fused(spec, q, k_cache, v_cache, rows, mask) -> torch.Tensor:
    out = torch.empty(q.shape)
    KERNELS.decode_attention(q, k_cache, v_cache, rows, mask, spec.scaling, spec.logit_softcap, out=out)
    return out


def _reference(spec, q, k_cache, v_cache, rows, mask) -> torch.Tensor:
    return attend_over_rows(spec, q[:, None], k_cache, v_cache, rows, mask[:, None, :])[:, 0]


@needs_kernels
@pytest.mark.parametrize(
    "b,h,kvh,d,length,cap",
    [
        (32, 4, 2, 32, 128, 50.0),  # the bench model's full layers
        (3, 4, 2, 32, 16, 50.0),  # its sliding layers
        (5, 8, 8, 20, 37, None),  # no grouping, a head_dim and a length off the vector width, no soft-cap
        (2, 6, 1, 64, 7, 5.0),  # one KV head for six queries, a cap that bites
        (3, 4, 1, 256, 40, None),  # Gemma-3-270M's heads: head_dim 256, four queries per KV head
    ],
)
def test_decode_attention_matches_the_torch_reference(b, h, kvh, d, length, cap):
    case = _attention_case(b, h, kvh, d, length, seed=b + length, cap=cap)
    got, want = _fused(*case), _reference(*case)
    assert got.shape == want.shape
    # The kernel's soft-cap, c - 2c / (1 + exp(2x / c)), is off tanh by up to c * 1e-7 near 0: ~5e-6 on a
    # score, a few 1e-6 on outputs of size ~1.
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@needs_kernels
def test_hidden_keys_are_not_read_and_a_row_with_none_visible_is_nan():
    """Keys past a row's length are never read, as a real kernel reads only a request's own tokens: NaN
    there changes nothing. A row that sees no key gets NaN, as torch's softmax of an all -inf row."""
    spec, q, k_cache, v_cache, rows, mask = _attention_case(4, 4, 2, 32, 24, seed=3)
    clean = _fused(spec, q, k_cache, v_cache, rows, mask)
    hidden_rows = rows.view(4, 2, 24)[mask[:, None, :].expand(4, 2, 24) != 0]
    visible_rows = rows.view(4, 2, 24)[mask[:, None, :].expand(4, 2, 24) == 0]
    poisoned_rows = hidden_rows[~torch.isin(hidden_rows, visible_rows)].long()
    assert poisoned_rows.numel() > 0
    k_bad, v_bad = k_cache.clone(), v_cache.clone()
    k_bad.view(-1, 32)[poisoned_rows] = float("nan")
    v_bad.view(-1, 32)[poisoned_rows] = float("nan")
    assert torch.equal(_fused(spec, q, k_bad, v_bad, rows, mask), clean)
    assert _reference(spec, q, k_bad, v_bad, rows, mask).isnan().any()  # the dense reference reads them
    mask[1] = float("-inf")
    out = _fused(spec, q, k_cache, v_cache, rows, mask)
    assert out[1].isnan().all() and not out[[0, 2, 3]].isnan().any()
    assert _reference(spec, q, k_cache, v_cache, rows, mask)[1].isnan().all()


@needs_kernels
def test_decode_attention_refuses_out_of_range_rows_and_bad_tensors_by_name():
    spec, q, k_cache, v_cache, rows, mask = _attention_case(2, 4, 2, 32, 8, seed=5)
    for bad in (-1, k_cache.numel() // 32):
        broken = rows.clone()
        broken[3] = bad
        with pytest.raises(IndexError, match=f"cache row {bad} out of range"):
            _fused(spec, q, k_cache, v_cache, broken, mask)
    with pytest.raises(RuntimeError, match="q must be float32"):
        _fused(spec, q.double(), k_cache, v_cache, rows, mask)
    with pytest.raises(RuntimeError, match="rows must be contiguous int32"):
        _fused(spec, q, k_cache, v_cache, rows.long(), mask)
    with pytest.raises(RuntimeError, match="mask must be contiguous float32"):
        _fused(spec, q, k_cache, v_cache, rows, mask[:1])


@needs_kernels
@pytest.mark.parametrize("t,i", [(32, 512), (3, 37)])
def test_gelu_tanh_and_mul_matches_torch(t, i):
    g = torch.Generator().manual_seed(t)
    x = torch.randn(t, 2 * i, generator=g) * 4
    x[0, :6] = torch.tensor([0.0, -0.0, 60.0, -60.0, 1e-30, -1e-30])
    out = torch.empty(t, i)
    KERNELS.gelu_tanh_and_mul(x, out=out)
    gate, up = x.chunk(2, dim=-1)
    exact = (F.gelu(gate.double(), approximate="tanh") * up.double()).float()
    # torch's fp32 gelu, 0.5x(1 + tanh(z)), cancels for negative x (1 + tanh(z) -> 0); the kernel's
    # x / (1 + exp(-2z)) does not: it is within 1e-6 of the float64 formula, and no further than torch.
    torch.testing.assert_close(out, exact, rtol=1e-5, atol=1e-6)
    torch_error = ((F.gelu(gate, approximate="tanh") * up) - exact).abs().max()
    assert (out - exact).abs().max() <= torch_error
    x[1, 0] = float("nan")
    KERNELS.gelu_tanh_and_mul(x, out=out)
    assert out[1, 0].isnan() and not out[2].isnan().any()
    with pytest.raises(RuntimeError, match="out must be contiguous float32"):
        KERNELS.gelu_tanh_and_mul(x, out=torch.empty(t, i + 1))


@needs_kernels
@pytest.mark.parametrize("gemma", [True, False])
@pytest.mark.parametrize("t,n", [(32, 128), (3, 37)])
def test_rms_norm_matches_the_torch_module(gemma, t, n):
    g = torch.Generator().manual_seed(n)
    norm = RMSNorm(n, 1e-6, gemma, torch.float32)
    norm.scale.copy_(1 + torch.randn(n, generator=g) * 0.1)
    x, residual = torch.randn(t, n, generator=g) * 5, torch.randn(t, n, generator=g)
    x[0] = 0.0  # an all-zero row: 1 / sqrt(eps)
    want, want_add = norm(x), norm.add_to(residual, x)
    norm.kernel = KERNELS.rms_norm
    torch.testing.assert_close(norm(x), want, rtol=2e-6, atol=1e-6)
    torch.testing.assert_close(norm.add_to(residual, x), want_add, rtol=2e-6, atol=1e-6)
    with pytest.raises(RuntimeError, match="residual must be contiguous float32"):
        KERNELS.rms_norm(x, norm.scale, 1e-6, residual[:1], out=torch.empty_like(x))
    with pytest.raises(RuntimeError, match="scale must be contiguous float32"):
        KERNELS.rms_norm(x, norm.scale[:-1], 1e-6, None, out=torch.empty_like(x))


@needs_kernels
def test_a_tape_records_each_kernel_as_one_op_and_replays_it():
    spec, q, k_cache, v_cache, rows, mask = _attention_case(3, 4, 2, 32, 16, seed=7)
    x = torch.randn(3, 64)

    def body():
        out = torch.empty(q.shape)
        KERNELS.decode_attention(q, k_cache, v_cache, rows, mask, spec.scaling, spec.logit_softcap, out=out)
        h = torch.empty(3, 32)
        KERNELS.gelu_tanh_and_mul(x, out=h)
        return out, h

    graph = TapeBackend().capture(body, static_inputs={"x": x})
    assert sorted(str(s.func) for s in graph._steps) == [
        "harness.decode_attention.default",
        "harness.gelu_tanh_and_mul.default",
    ]
    x.normal_()
    k_cache.normal_()
    for got, want in zip(graph.replay({"x": x}), body()):
        assert torch.equal(got, want)


@needs_kernels
@pytest.mark.parametrize("graphs", ["off", "tape"])
def test_engine_logits_with_and_without_kernels_agree(graphs):
    sequences = list(zip(random_sequences([3, 40], seed=1), random_sequences([30, 12], seed=2)))
    fused = make_engine("gemma2", graphs, cpu_kernels="fused")
    assert fused.runner.attn_backend.decode_kernel is not None
    torch_ops = make_engine("gemma2", graphs, cpu_kernels="torch")
    assert torch_ops.runner.attn_backend.decode_kernel is None
    for a, b in zip(fused.teacher_forced_logits(sequences), torch_ops.teacher_forced_logits(sequences)):
        diff = (a - b).abs().max().item()
        assert diff <= 2e-5, f"fused vs torch ops: max abs diff {diff:.2e}"


def test_kernel_modes_are_checked():
    with pytest.raises(ValueError, match="cpu_kernels must be one of"):
        resolve_kernels("fast", device=torch.device("cpu"), dtype=torch.float32)
    with pytest.raises(KernelUnavailable, match="float32 on CPU"):
        resolve_kernels("fused", device=torch.device("cpu"), dtype=torch.bfloat16)
    assert resolve_kernels("torch", device=torch.device("cpu"), dtype=torch.float32).decode_attention is None


def test_a_failed_build_falls_back_to_torch_ops_in_auto_and_is_an_error_in_fused(monkeypatch, caplog):
    monkeypatch.setattr(cpu_kernels, "_build", lambda: "CalledProcessError: g++: not found")
    with caplog.at_level(logging.WARNING):
        kernels = resolve_kernels("auto", device=torch.device("cpu"), dtype=torch.float32)
    assert kernels == CpuKernels() and kernels.in_use == "torch"
    assert "could not be built (CalledProcessError: g++: not found)" in caplog.text
    with pytest.raises(KernelUnavailable, match="g\\+\\+: not found"):
        resolve_kernels("fused", device=torch.device("cpu"), dtype=torch.float32)


@needs_kernels
def test_the_dense_reference_runs_torch_ops_even_on_a_model_with_kernels():
    """The dense reference checks the kernels, so it must not run them."""
    engine = make_engine("gemma2", "off", cpu_kernels="fused")
    model, kernels = engine.model, engine.kernels
    seqs = random_sequences([9, 30], seed=4)
    first = reference_logits(model, seqs)
    assert model.layers[0].input_norm.kernel is kernels.rms_norm  # back in use after the reference run
    model.use_kernels(gelu_tanh_and_mul=None, rms_norm=None)
    assert all(torch.equal(a, b) for a, b in zip(first, reference_logits(model, seqs)))


# -- the build: per environment, one at a time, never blocked by a killed one ----------------------------------


def _hold_lock(path, release_after: float = 300.0):
    """Another process holding the build lock (as a build in progress does), writing its pid as a build does."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import fcntl, os, sys, time
        f = open({str(path)!r}, "a+")
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0); f.truncate(); f.write(str(os.getpid())); f.flush()
        print("held", flush=True)
        time.sleep({release_after})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def fake_build(monkeypatch, tmp_path):
    """The build directory in tmp_path and torch's builder replaced by a recorder (no compiler runs)."""
    calls = []
    monkeypatch.setattr(cpu_kernels, "build_directory", lambda: tmp_path)
    monkeypatch.delenv(KERNEL_STORE_ENV, raising=False)  # nox's sessions set one; these tests build alone

    def load(name, build_directory, **kwargs):
        calls.append({"name": name, "directory": build_directory, "baton_left": (tmp_path / name / "lock").exists()})
        (Path(build_directory) / f"{name}.so").write_bytes(b"machine code of " + build_directory.encode())

    import torch.utils.cpp_extension

    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    return calls


def _name() -> str:
    return f"swa_harness_cpu_kernels_{torch.backends.cpu.get_cpu_capability().lower()}"


def test_a_build_killed_while_it_held_the_locks_does_not_block_the_next(fake_build, tmp_path) -> None:
    """It used to: torch's own lock file, left by a SIGKILLed build, made every later start wait forever."""
    import signal

    holder = _hold_lock(tmp_path / f"{_name()}.lock")
    (tmp_path / _name()).mkdir()
    (tmp_path / _name() / "lock").write_text("")  # torch's baton, as a killed build leaves it
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert cpu_kernels._build.__wrapped__() is None
    assert fake_build == [{"name": _name(), "directory": str(tmp_path / _name()), "baton_left": False}]


def test_a_wait_for_a_live_build_is_bounded_and_names_the_lock_and_its_holder(
    fake_build, tmp_path, monkeypatch, caplog
) -> None:
    monkeypatch.setattr(cpu_kernels, "BUILD_WAIT_S", 1.0)
    monkeypatch.setattr(cpu_kernels, "_SAY_EVERY_S", 0.3)
    holder = _hold_lock(tmp_path / f"{_name()}.lock")
    try:
        with caplog.at_level(logging.WARNING):
            reason = cpu_kernels._build.__wrapped__()
    finally:
        holder.kill()
        holder.wait()
    assert reason == f"waited 1 s for the kernel build lock {tmp_path / (_name() + '.lock')} (held by pid {holder.pid})"
    assert f"pid {holder.pid} is building them" in caplog.text  # said while waiting, not silent
    assert fake_build == []  # never built beside another build


def test_each_environment_builds_in_its_own_directory() -> None:
    import sys

    assert str(cpu_kernels.build_directory()).startswith(sys.prefix)  # this venv's, never a shared ~/.cache one


def test_two_checkouts_on_one_environment_build_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worktree beside the main checkout, on the same venv: torch's builder keys a build by its sources' paths, so a
    shared folder was rebuilt (about a minute on 2 cores) at every switch between the two, each waiting on the
    other's lock."""
    here = cpu_kernels.build_directory()
    worktree = tmp_path / "worktree" / "harness" / "engine" / "csrc"
    monkeypatch.setattr(cpu_kernels, "SOURCES", tuple(worktree / s.name for s in cpu_kernels.SOURCES))
    there = cpu_kernels.build_directory()
    assert here != there and here.parent == there.parent  # apart, inside the same environment


def test_a_build_in_the_shared_store_is_loaded_by_another_environment_without_compiling(
    fake_build, tmp_path, monkeypatch
) -> None:
    """CI's five venvs share one torch build: the first compiles and publishes, the others load its library."""
    loaded: list[str] = []
    monkeypatch.setattr(torch.ops, "load_library", loaded.append)
    monkeypatch.setenv(KERNEL_STORE_ENV, str(tmp_path / "store"))
    first, second = tmp_path / "venv-a", tmp_path / "venv-b"
    monkeypatch.setattr(cpu_kernels, "build_directory", lambda: first)
    assert cpu_kernels._build.__wrapped__() is None
    stored = tmp_path / "store" / cpu_kernels.store_key(torch.backends.cpu.get_cpu_capability()) / f"{_name()}.so"
    assert stored.read_bytes() == (first / _name() / f"{_name()}.so").read_bytes()  # published whole
    assert [p.name for p in stored.parent.iterdir()] == [stored.name]  # no partial copy left beside it
    monkeypatch.setattr(cpu_kernels, "build_directory", lambda: second)
    assert cpu_kernels._build.__wrapped__() is None
    assert [c["directory"] for c in fake_build] == [str(first / _name())]  # compiled once, in the first venv
    assert loaded == [str(stored)]


def test_the_store_key_follows_the_sources_and_torchs_build(tmp_path, monkeypatch) -> None:
    capability = torch.backends.cpu.get_cpu_capability()
    key = cpu_kernels.store_key(capability)
    assert cpu_kernels.store_key(capability) == key  # stable
    copies = []
    for source in cpu_kernels.SOURCES:
        copy = tmp_path / source.name
        copy.write_bytes(source.read_bytes())
        copies.append(copy)
    monkeypatch.setattr(cpu_kernels, "SOURCES", tuple(copies))
    assert cpu_kernels.store_key(capability) == key  # the bytes count, not where they lie
    copies[0].write_bytes(copies[0].read_bytes() + b"\n// changed\n")
    assert cpu_kernels.store_key(capability) != key
    monkeypatch.undo()  # the real sources again
    monkeypatch.setattr(torch.version, "git_version", "another torch build")
    assert cpu_kernels.store_key(capability) != key
    assert cpu_kernels.store_key("AVX2" if capability != "AVX2" else "AVX512") != key
