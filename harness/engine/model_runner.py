"""ModelRunner: attention backend and graph runner around one model and one hybrid pool;
``forward(batch) -> logits``."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from dataclasses import dataclass

import torch

from harness.engine.attention_backend import PoolAttentionBackend
from harness.engine.cpu_kernels import CpuKernels
from harness.engine.forward_batch import ForwardBatch
from harness.engine.scheduler import pages, swa_slots_needed
from harness.graph.backends import make_backend, resolve_mode
from harness.graph.buffers import DecodeInputs
from harness.graph.extend_buffers import ExtendInputs
from harness.graph.extend_runner import ExtendGraphRunner
from harness.graph.runner import GraphRunner
from harness.mem import HybridPool
from harness.model import HybridSWAForCausalLM
from harness.seams import seam

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolSizes:
    """Sizes of the request map and both KV pools, derived from the serving limits by default."""

    max_running: int
    max_context_len: int
    full_size: int
    swa_size: int

    @classmethod
    def default(
        cls,
        *,
        max_running: int,
        max_context_len: int,
        window: int | None,
        max_prefill_tokens: int,
        page_size: int = 1,
        speculative_tokens: int = 0,
        prefix_cache: bool = False,
        swa_windows_held: int = 1,
        steps_in_flight: int = 1,
    ) -> "PoolSizes":
        # The SWA pool is sized for the window, not for whole sequences (see scheduler.py); both in whole pages.
        swa = swa_slots_needed(
            max_running=max_running,
            window=window,
            max_prefill_tokens=max_prefill_tokens,
            page_size=page_size,
            speculative_tokens=speculative_tokens,
            prefix_cache=prefix_cache,
            swa_windows_held=swa_windows_held,
            steps_in_flight=steps_in_flight,
        )
        full = max_running * pages(max_context_len, page_size) * page_size
        return cls(max_running, max_context_len, full_size=full, swa_size=swa)


def kv_len_buckets(max_context_len: int, smallest: int = 64, growth: int = 2) -> list[int]:
    """64, 128, 256, ... (steps of ``growth``) below the context length, then the context length itself;
    a step within 1.25x of the context is left to the last bucket.

    A torch reference kernel reads a fixed ``[bs, kv_len]`` block of keys in the full-attention layers
    (sliding layers read their window whatever the bucket), so a decode row reads under ``growth`` times
    the keys it needs (under 2.5x in the last bucket). At batch 32 those reads are a third of a small
    model's step (docs/BENCHMARKS.md, profile), so the steps are 2x, not the 4x they were while every tape
    graph kept its own intermediates: graphs now share one arena (``harness.graph.tape_memory``), and each
    (batch bucket, KV bucket) pair costs its capture time and the few tensors it holds on to. A 4k context
    has 7 buckets, a 32k one 10."""
    buckets, n = [], smallest
    while n * 1.25 <= max_context_len:
        buckets.append(n)
        n *= growth
    return buckets + [max_context_len]


CAPTURE_MODES = ("startup", "lazy")
"""When graphs are captured: all at start-up (as SGLang does), or each on the first batch that needs it."""


class ModelRunner:
    def __init__(
        self,
        model: HybridSWAForCausalLM,
        memory: HybridPool,
        *,
        graphs: str = "auto",
        max_extend_tokens: int | None = None,
        capture: str = "startup",
        kernels: CpuKernels = CpuKernels(),
    ) -> None:
        if capture not in CAPTURE_MODES:
            raise ValueError(f"capture must be one of {CAPTURE_MODES}, got {capture!r}")
        self.model = model
        self.device = model.embed.device
        self.pool = memory.pool
        self.allocator = memory.allocator
        self.req_to_token_pool = memory.req_to_token_pool
        max_bs = self.req_to_token_pool.size
        self.attn_backend = PoolAttentionBackend(
            self.pool, self.req_to_token_pool, model.layer_specs, max_bs=max_bs, decode_kernel=kernels.decode_attention
        )
        model.use_kernels(gelu_tanh_and_mul=kernels.gelu_tanh_and_mul, rms_norm=kernels.rms_norm)
        self.graph_mode = resolve_mode(graphs, self.device)
        self.graph_runner: GraphRunner | None = None
        self.extend_graph_runner: ExtendGraphRunner | None = None
        self.paths: Counter[str] = Counter()  # forwards per path: decode/extend x graph/eager
        if self.graph_mode != "off":
            self.graph_runner = GraphRunner(
                self,
                make_backend(self.graph_mode),
                max_bs=max_bs,
                vocab_size=model.config.vocab_size,
                is_hybrid_swa=bool(model.config.sliding_layer_ids),
                device=self.device,
                kv_len_buckets=kv_len_buckets(self.req_to_token_pool.max_context_len),
            )
            self.graph_runner.capture(lazy=capture == "lazy")
            if max_extend_tokens:
                self.extend_graph_runner = ExtendGraphRunner(
                    self,
                    make_backend(self.graph_mode),
                    max_tokens=max_extend_tokens,
                    max_reqs=max_bs,
                    vocab_size=model.config.vocab_size,
                    is_hybrid_swa=bool(model.config.sliding_layer_ids),
                    device=self.device,
                )
                self.extend_graph_runner.capture(lazy=capture == "lazy")

    # -- the forward -----------------------------------------------------------------------------

    @torch.no_grad()
    def forward(self, batch: ForwardBatch) -> torch.Tensor:
        """Logits for ``batch.logits_indices`` (extend) or every row (decode)."""
        self._begin_forward()
        kind = "decode" if batch.forward_mode.is_decode() else "extend"
        if self.graph_runner is not None and self.graph_runner.can_run(batch, is_decode=kind == "decode"):
            self.paths[f"{kind}-graph"] += 1
            return self._forward_graph(batch)
        if self.extend_graph_runner is not None and self.extend_graph_runner.can_run(batch):
            self.paths[f"{kind}-graph"] += 1
            return self._forward_extend_graph(batch)
        self.paths[f"{kind}-eager"] += 1
        return self._forward_eager(batch)

    @seam("invalidate-after-graph-check")
    def _begin_forward(self) -> None:
        """Every forward starts from an empty memo, before the graph decision: an eager forward ends
        with the memo keyed on its out_cache_loc, and a graph path must not start from that (#26152)."""
        self.pool.invalidate_loc_cache()

    def _forward_graph(self, batch: ForwardBatch) -> torch.Tensor:
        batch.out_cache_loc_swa = self.pretranslate_swa_loc(batch)
        return self.graph_runner.replay(batch)  # fills the graph's metadata, then replays

    def _forward_extend_graph(self, batch: ForwardBatch) -> torch.Tensor:
        batch.out_cache_loc_swa = self.pretranslate_swa_loc(batch)
        return self.extend_graph_runner.replay(batch)

    @seam("invalidate-after-graph-check")
    def _forward_eager(self, batch: ForwardBatch) -> torch.Tensor:
        self.attn_backend.init_forward_metadata(batch)
        batch.out_cache_loc_swa = self.pretranslate_swa_loc(batch)
        self.attn_backend.begin_forward(batch)
        return self.model(
            batch.input_ids, batch.positions, self.attn_backend, batch, logits_indices=batch.logits_indices
        )

    def pretranslate_swa_loc(self, batch: ForwardBatch) -> torch.Tensor:
        """The new tokens' SWA slots, translated once for the whole forward (one gather, any number of SWA layers)."""
        return self.pool.translate_loc_from_full_to_swa(batch.out_cache_loc)

    # -- DecodeGraphTarget -----------------------------------------------------------------------

    @seam("capture-after-warm-cache", "extend-capture-after-warm-cache")
    def begin_capture_run(self) -> None:
        """Warm-up and capture each start from an empty memo: a translation cached by the warm-up
        would be a Python-side hit during capture, the gather it skips would be missing from the
        graph, and every replay would reuse the warm-up's slots (#25824)."""
        self.pool.invalidate_loc_cache()

    def prepare_graph_metadata(self, inputs: DecodeInputs) -> None:
        self.attn_backend.prepare_graph_metadata(inputs)

    def graph_forward(self, inputs: DecodeInputs) -> torch.Tensor:
        self.attn_backend.begin_forward(inputs)
        return self.model(inputs.input_ids, inputs.positions, self.attn_backend, inputs)

    # -- ExtendGraphTarget -----------------------------------------------------------------------

    def prepare_extend_graph_metadata(self, inputs: ExtendInputs) -> None:
        self.attn_backend.prepare_extend_graph(inputs)

    def extend_graph_forward(self, inputs: ExtendInputs) -> torch.Tensor:
        if inputs.out_cache_loc_swa is None and self.model.config.sliding_layer_ids:
            # No pre-set SWA loc: the captured body translates the write loc itself (the slow path).
            inputs = dataclasses.replace(
                inputs, out_cache_loc_swa=self.pool.translate_loc_from_full_to_swa(inputs.out_cache_loc)
            )
        return self.model(
            inputs.input_ids, inputs.positions, self.attn_backend, inputs, logits_indices=inputs.logits_indices
        )
