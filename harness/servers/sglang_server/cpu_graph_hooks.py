"""The three CPU-graph hooks SGLang's CPU graph runner calls on its attention backend, for ``torch_native``.

SGLang 0.5.23's ``cpu_graph_runner.py`` (``--enable-torch-compile`` with ``--device cpu``: decode compiled
by torch.compile, batch sizes from ``--cuda-graph-bs-decode``) calls ``init_cpu_graph_state``,
``get_cpu_graph_seq_len_fill_value`` and ``init_forward_metadata_capture_cpu_graph`` on the attention
backend; only its AMX backend (``intel_amx``) has them, and a CPU without AMX has only ``torch_native``,
so graphs on crash at start-up (``AttributeError: 'TorchNativeAttnBackend' object has no attribute
'init_cpu_graph_state'``; docs/FINDINGS.md). These fill the gap with what ``torch_native`` already does
per forward, and add nothing it computes:

* its metadata is made per forward (``init_forward_metadata``: the SWA write locations, translated once),
  so there is no state to allocate ahead;
* padded rows of a captured batch get seq_len 1 (as the AMX backend's): they read one key, at slot 0;
* the capture-time metadata is ``init_forward_metadata``'s, for the capture batch's write locations.

The runner also registers fake (meta) implementations of ``sgl_kernel``'s CPU ops for torch.compile, which
fails when the ops do not exist (``operator sgl_kernel::shm_allreduce does not exist``): without sgl_kernel's
CPU build none does, and none is ever called (torch_native takes plain PyTorch). ``install`` makes that
registration skip ops that do not exist.

Installed only where SGLang lacks them (a release that has them keeps its own).
"""

from __future__ import annotations

from typing import Any

import torch

HOOKS = ("init_cpu_graph_state", "get_cpu_graph_seq_len_fill_value", "init_forward_metadata_capture_cpu_graph")


def init_cpu_graph_state(self: Any, max_bs: int, max_num_tokens: int) -> None:
    """Nothing to allocate: torch_native makes its metadata per forward."""


def get_cpu_graph_seq_len_fill_value(self: Any) -> int:
    return 1


def init_forward_metadata_capture_cpu_graph(
    self: Any,
    bs: int,
    num_tokens: int,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
    encoder_lens: Any,
    forward_mode: Any,
    spec_info: Any,
) -> None:
    """What ``init_forward_metadata`` does for a batch, for the capture batch's write locations."""
    if self.use_sliding_window_kv_pool and out_cache_loc is not None:
        self.swa_out_cache_loc = self.token_to_kv_pool.translate_loc_from_full_to_swa(out_cache_loc)
    else:
        self.swa_out_cache_loc = None


def install() -> list[str]:
    """Add the hooks SGLang's ``TorchNativeAttnBackend`` lacks, and skip fake registrations of absent ops; the
    names of what was added."""
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.model_executor import cpu_graph_runner

    added = []
    for name in HOOKS:
        if not hasattr(TorchNativeAttnBackend, name):
            setattr(TorchNativeAttnBackend, name, globals()[name])
            added.append(name)
    register = cpu_graph_runner.register_cpu_compile_fake
    if not getattr(register, "skips_absent_ops", False):

        def register_existing(op_name: str) -> Any:
            if not hasattr(torch.ops.sgl_kernel, op_name):
                return lambda fake: fake  # no such op: nothing can call it, nothing to fake
            return register(op_name)

        register_existing.skips_absent_ops = True  # type: ignore[attr-defined]
        cpu_graph_runner.register_cpu_compile_fake = register_existing
        added.append("register_cpu_compile_fake (absent ops skipped)")
    return added
