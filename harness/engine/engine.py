"""Engine: load an HF-format checkpoint, then ``generate`` with continuous batching over the hybrid pool."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.engine.forward_batch import ForwardBatch, ForwardMode
from harness.engine.cpu_kernels import KERNEL_MODES, resolve_kernels
from harness.engine.model_runner import ModelRunner, PoolSizes
from harness.engine.overlap import Schedule, resolve_futures
from harness.engine.request import FinishReason, GenerateOutput, PositionLogprobs, Req, RequestError, SamplingParams
from harness.engine.sampling import SamplingFailure, sample
from harness.engine.scheduler import PromptRows, ScheduledBatch, Scheduler
from harness.mem import HybridPool, HybridPoolSpec, PoolBuilder, build_hybrid_pool
from harness.mem.radix_cache import RADIX_CACHE, CacheBuilder
from harness.model import Tokenizer, load_config, load_model
from harness.seams import seam

logger = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEFAULT_CONTEXT_CAP = 4096  # default max_context_len when the model allows more


def available_memory_bytes(device: torch.device | str = "cpu") -> int | None:
    """Free memory where the KV pools live: the CUDA device's free memory, else the host's MemAvailable."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass(frozen=True)
class EngineConfig:
    model_path: str | Path
    graphs: str = "auto"  # off | eager | tape | cuda | auto
    dtype: str = "float32"
    kv_dtype: str | None = None  # defaults to dtype
    device: str = "cpu"
    max_running_requests: int = 32  # also the largest decode graph bucket
    # Default: the model's max_position_embeddings, capped at DEFAULT_CONTEXT_CAP with a warning (a
    # real model's 32k-128k would size every pool and graph for contexts nobody asked for).
    max_context_len: int | None = None
    chunk_size: int = 256  # prefill tokens per request per step
    max_prefill_tokens: int = 1024  # prefill tokens per step
    full_pool_size: int | None = None  # default: max_running x context, shrunk to kv_memory_fraction (warned)
    swa_pool_size: int | None = None
    page_size: int = 1  # KV slots per page; above 1 requests grow page by page (SGLang's paged allocators)
    # Speculative decoding: up to this many prompt-lookup drafts per request, verified in one extend-path
    # forward (graphs: the piecewise extend graphs); 0 = off. Greedy requests only, page size 1.
    speculative_tokens: int = 0
    kv_memory_fraction: float = 0.25  # share of available memory the default full pool may take
    num_threads: int | None = None  # torch intra-op threads; small models on CPU run fastest on 1
    extend_graphs: bool = True  # with graphs on, prefill/extend batches run piecewise graphs too
    capture: str = "startup"  # startup | lazy: every graph at start-up (SGLang's way), or each on first use
    # auto | torch | fused: decode attention, the MLP's gelu * up and RMSNorm as compiled CPU kernels (fp32)
    # where they build, or torch ops (harness/engine/cpu_kernels.py)
    cpu_kernels: str = "auto"
    # A radix cache of finished and chunked requests' KV (harness/mem/radix_cache.py), as every real server
    # keeps: a request skips the prefill of its cached prefix. Off: every request prefills its whole prompt.
    prefix_cache: bool = True
    # sync | overlap: step n+1 scheduled while step n's forward is in flight, as SGLang's overlap scheduler and
    # vLLM's async scheduling do (harness/engine/overlap.py: its rules); not with speculative decoding
    schedule: Schedule | str = Schedule.SYNC

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "schedule", Schedule(self.schedule))
        except ValueError:
            raise ValueError(f"schedule must be one of {[s.value for s in Schedule]}, got {self.schedule!r}") from None
        if self.schedule is Schedule.OVERLAP and self.speculative_tokens:
            raise ValueError(
                "schedule='overlap' needs speculative_tokens 0: a verify's accepted count decides where "
                "the next step starts"
            )
        for name in ("dtype", "kv_dtype"):
            value = getattr(self, name)
            if value is not None and value not in DTYPES:
                raise ValueError(f"{name} must be one of {sorted(DTYPES)}, got {value!r}")
        for name in ("max_running_requests", "chunk_size", "max_prefill_tokens", "page_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.speculative_tokens < 0:
            raise ValueError(f"speculative_tokens must be >= 0, got {self.speculative_tokens}")
        if self.speculative_tokens and self.page_size > 1:
            raise ValueError("speculative_tokens needs page_size 1: rejected drafts give back their slots one by one")
        if self.cpu_kernels not in KERNEL_MODES:
            raise ValueError(f"cpu_kernels must be one of {KERNEL_MODES}, got {self.cpu_kernels!r}")
        if not 0 < self.kv_memory_fraction <= 1:
            raise ValueError(f"kv_memory_fraction must be in (0, 1], got {self.kv_memory_fraction}")


@dataclass(frozen=True)
class CacheStats:
    """The prefix cache: tokens it holds (full KV, live SWA KV) and prompt tokens it served since start-up."""

    enabled: bool
    tokens: int = 0
    swa_tokens: int = 0
    prompt_tokens: int = 0  # prompt tokens of every admitted request
    cached_tokens: int = 0  # of them, served from the cache
    # What the tree's evictions took since start-up, measured on the slots it holds (``harness.mem.eviction``):
    # tokens whose full KV went, whose live SWA KV went, and of those the ones whose full KV stayed (tombstoned).
    evicted_tokens: int = 0
    swa_evicted_tokens: int = 0
    swa_tombstoned_tokens: int = 0

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass(frozen=True)
class StepOutput:
    """What one ``Engine.step()`` did: which forward ran, which requests it advanced, which finished."""

    mode: ForwardMode | None  # None: there was nothing to run
    advanced: tuple[int, ...] = ()  # rids whose KV grew in this forward
    finished: tuple[GenerateOutput, ...] = ()


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        *,
        pool_builder: PoolBuilder = build_hybrid_pool,
        cache_builder: CacheBuilder = RADIX_CACHE,
    ) -> None:
        self.config = config
        self.cache_builder = cache_builder  # the SWA pool is sized for its policy (_pool_spec)
        if config.num_threads is not None:
            torch.set_num_threads(config.num_threads)
        path = Path(config.model_path)
        self.model_config = load_config(path)
        self.max_context_len = config.max_context_len or self._default_context_len()
        # RoPE tables for the context actually served, not the model's (possibly 128k) maximum.
        self.model = load_model(
            path,
            dtype=DTYPES[config.dtype],
            device=config.device,
            config=self.model_config,
            max_positions=self.max_context_len,
        )
        self.tokenizer = Tokenizer.from_dir(path) if (path / "tokenizer.json").is_file() else None
        self.kernels = resolve_kernels(config.cpu_kernels, device=self.model.embed.device, dtype=self.model.dtype)
        self.runner = ModelRunner(
            self.model,
            pool_builder(self._pool_spec()),
            graphs=config.graphs,
            max_extend_tokens=config.max_prefill_tokens if config.extend_graphs else None,
            capture=config.capture,
            kernels=self.kernels,
        )
        window = self.model_config.swa_window
        memory = HybridPool(self.runner.pool, self.runner.allocator, self.runner.req_to_token_pool)
        self.tree_cache = cache_builder.build(memory, sliding_window_size=window) if config.prefix_cache else None
        self.scheduler = Scheduler(
            self.runner.req_to_token_pool,
            self.runner.allocator,
            max_running=config.max_running_requests,
            chunk_size=config.chunk_size,
            max_prefill_tokens=config.max_prefill_tokens,
            window=window,
            speculative_tokens=config.speculative_tokens,
            tree_cache=self.tree_cache,
            overlap=config.schedule is Schedule.OVERLAP,
        )
        self._in_flight: tuple[ScheduledBatch, ForwardBatch] | None = None  # overlap: the step launched, not run
        self._drained: list[GenerateOutput] = []  # overlap: outputs of a step run early by ``cancel``
        self.spec_stats = {"verifies": 0, "drafts": 0, "accepted": 0}  # counts over the engine's life
        self._hits = {"prompt_tokens": 0, "cached_tokens": 0}  # the prefix cache's, over finished requests
        self.eos_token_ids = set(self.model_config.eos_token_ids) | set(
            self.tokenizer.eos_token_ids if self.tokenizer else ()
        )
        self._rids = itertools.count()

    def _default_context_len(self) -> int:
        """The model's max_position_embeddings, capped at ``DEFAULT_CONTEXT_CAP`` (warned)."""
        model_max = self.model_config.max_position_embeddings
        if model_max <= DEFAULT_CONTEXT_CAP:
            return model_max
        logger.warning(
            "max_context_len capped at %d tokens (the model allows %d): the default sizes the full KV "
            "pool and the decode graphs' KV buckets for it; pass max_context_len (--max-context-len) to "
            "raise it",
            DEFAULT_CONTEXT_CAP,
            model_max,
        )
        return DEFAULT_CONTEXT_CAP

    def _pool_spec(self) -> HybridPoolSpec:
        """The pools' sizes from the serving limits (overridable), layout and dtype from the model.

        The default full pool holds every running request at the whole context, unless that takes more
        than ``kv_memory_fraction`` of the available memory: then it is shrunk to fit (never below one
        whole context), with a warning. Admission reserves each request's worst case, so a smaller
        full pool only admits fewer long requests at once; it never fails mid-generation."""
        cfg, limits = self.model_config, self.config
        default = PoolSizes.default(
            max_running=limits.max_running_requests,
            max_context_len=self.max_context_len,
            window=cfg.swa_window,
            max_prefill_tokens=limits.max_prefill_tokens,
            page_size=limits.page_size,
            speculative_tokens=limits.speculative_tokens,
            prefix_cache=limits.prefix_cache,
            swa_windows_held=self.cache_builder.swa_windows_held if limits.prefix_cache else 1,
            steps_in_flight=limits.schedule.steps_in_flight,
        )
        kv_dtype = DTYPES[limits.kv_dtype] if limits.kv_dtype else self.model.dtype
        full_size = limits.full_pool_size or self._fit_full_pool(default.full_size, kv_dtype)
        swa_size = limits.swa_pool_size or default.swa_size
        if swa_size < default.swa_size:
            raise ValueError(
                f"swa_pool_size={swa_size} cannot serve max_running_requests x window + max_prefill_tokens "
                f"= {default.swa_size} slots (in whole pages of {limits.page_size}); raise it or lower those limits"
            )
        for name, size in (("full_pool_size", full_size), ("swa_pool_size", swa_size)):
            if size % limits.page_size:
                raise ValueError(f"{name}={size} is not a whole number of pages of {limits.page_size} slots")
        return HybridPoolSpec(
            size=full_size,
            size_swa=swa_size,
            swa_layers=cfg.sliding_layer_ids,
            full_layers=cfg.full_layer_ids,
            dtype=kv_dtype,
            head_num=cfg.num_key_value_heads,
            head_dim=cfg.head_dim,
            max_requests=limits.max_running_requests,
            max_context_len=self.max_context_len,
            page_size=limits.page_size,
            device=self.model.embed.device,
        )

    def _fit_full_pool(self, wanted: int, kv_dtype: torch.dtype) -> int:
        cfg = self.model_config
        per_token = len(cfg.full_layer_ids) * 2 * cfg.num_key_value_heads * cfg.head_dim * kv_dtype.itemsize
        available = available_memory_bytes(self.model.embed.device)
        if not per_token or available is None:
            return wanted
        budget = int(available * self.config.kv_memory_fraction)
        if wanted * per_token <= budget:
            return wanted
        ps = self.config.page_size
        fitted = max(-(-self.max_context_len // ps), budget // per_token // ps) * ps  # whole pages
        logger.warning(
            "full KV pool capped at %d slots (%.2f GiB), not max_running_requests x max_context_len = "
            "%d x %d = %d slots (%.2f GiB): kv_memory_fraction=%.2f of the %.1f GiB available; fewer "
            "long requests run at once (pass full_pool_size to override)",
            fitted,
            fitted * per_token / 2**30,
            self.config.max_running_requests,
            self.max_context_len,
            wanted,
            wanted * per_token / 2**30,
            self.config.kv_memory_fraction,
            available / 2**30,
        )
        return fitted

    @property
    def graph_mode(self) -> str:
        return self.runner.graph_mode

    # -- requests --------------------------------------------------------------------------------

    def add_request(
        self,
        prompt: str | Sequence[int],
        sampling: SamplingParams = SamplingParams(),
        *,
        forced_output_ids: Sequence[int] | None = None,
        return_logits: bool = False,
        prompt_logprobs: int | None = None,
    ) -> Req:
        """Queue a request; raises ``RequestError`` (and queues nothing) when it can never be served.

        ``prompt_logprobs=k`` scores every prompt token with the forward that prefills it (its logprob and the top
        ``k``; the output's ``prompt_logprobs``), bypassing the prefix cache; only such a request may ask for
        ``max_new_tokens=0`` (score the prompt, generate nothing)."""
        sampling.validate()
        if prompt_logprobs is not None and (
            not isinstance(prompt_logprobs, int) or not 0 <= prompt_logprobs <= self.model_config.vocab_size
        ):
            raise RequestError(
                f"prompt_logprobs must be an integer in [0, {self.model_config.vocab_size}], got {prompt_logprobs!r}"
            )
        if sampling.max_new_tokens == 0 and prompt_logprobs is None:
            raise RequestError(
                "max_new_tokens must be a positive integer, got 0 (0 only scores a prompt: ask for prompt_logprobs)"
            )
        prompt_ids = self._prompt_ids(prompt)
        if forced_output_ids is not None:
            forced_output_ids = self._check_ids(forced_output_ids, "forced_output_ids")
            sampling = SamplingParams(max_new_tokens=len(forced_output_ids), ignore_eos=True)
        need = len(prompt_ids) + max(sampling.max_new_tokens - 1, 0)  # the last sampled token needs no KV slot
        if need > self.max_context_len:
            raise RequestError(
                f"prompt ({len(prompt_ids)} tokens) + max_new_tokens ({sampling.max_new_tokens}) needs {need} tokens "
                f"of context; this engine allows {self.max_context_len}"
            )
        if need > self.runner.allocator.size:
            raise RequestError(f"request needs {need} KV slots but the full pool has only {self.runner.allocator.size}")
        req = Req(
            next(self._rids),
            prompt_ids=prompt_ids,
            sampling=sampling,
            forced_output_ids=list(forced_output_ids) if forced_output_ids else None,
            return_logits=return_logits,
            prompt_logprobs=prompt_logprobs,
        )
        if sampling.temperature > 0:
            req.generator = torch.Generator(device=self.runner.device).manual_seed(
                sampling.seed if sampling.seed is not None else req.rid
            )
        self.scheduler.add(req)
        return req

    def _prompt_ids(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise RequestError("this checkpoint has no tokenizer.json: pass token ids, not text")
            ids = self.tokenizer.encode(prompt)
        else:
            ids = self._check_ids(prompt, "prompt")
        if not ids:
            raise RequestError("prompt is empty")
        return ids

    def _check_ids(self, ids: Sequence[int], name: str) -> list[int]:
        ids = list(ids)
        vocab = self.model_config.vocab_size
        bad = [t for t in ids if not isinstance(t, int) or not 0 <= t < vocab]
        if bad:
            raise RequestError(f"{name} holds token ids outside [0, {vocab}): {bad[:5]}")
        return ids

    # -- the loop --------------------------------------------------------------------------------

    def has_work(self) -> bool:
        return self.scheduler.has_work() or self._in_flight is not None or bool(self._drained)

    def cancel(self, req: Req) -> bool:
        """Drop one request, queued or running, giving back whatever it holds; False if it is gone already. With
        overlap scheduling the step in flight runs first when the request is in it (overlap.py, rule 3)."""
        if self._in_flight is not None and req in self._in_flight[0].reqs:
            launched, self._in_flight = self._in_flight, None
            self._drained += self._run_launched(*launched).finished
        return self.scheduler.cancel(req)

    def step(self) -> StepOutput:
        """One forward of the scheduler's next batch, then sampling for the requests that need a token. With overlap
        scheduling: launch the next step (schedule it, allocate its KV), then run, sample and commit the one in
        flight (``harness/engine/overlap.py``)."""
        if self.config.schedule is Schedule.OVERLAP:
            return self._step_overlapped()
        launched = self._launch()
        return StepOutput(None) if launched is None else self._run(*launched)

    def _launch(self) -> tuple[ScheduledBatch, ForwardBatch] | None:
        sched = self.scheduler.schedule()
        return None if sched is None else (sched, self.scheduler.build_forward_batch(sched))

    def _step_overlapped(self) -> StepOutput:
        if self._in_flight is None:
            self._in_flight = self._launch()
        running, self._in_flight = self._in_flight, None
        if running is None:
            return self._with_drained(StepOutput(None))
        self._in_flight = self._launch()  # step n+1, while step n is in flight
        return self._with_drained(self._run_launched(*running))

    def _run_launched(self, sched: ScheduledBatch, batch: ForwardBatch) -> StepOutput:
        resolve_futures(sched.futures, batch)  # its inputs the step before it sampled
        return self._run(sched, batch)

    def _with_drained(self, out: StepOutput) -> StepOutput:
        """``out`` with the outputs of a step ``cancel`` ran early, so that no finished request goes unreported."""
        if not self._drained:
            return out
        drained, self._drained = tuple(self._drained), []
        return StepOutput(out.mode, out.advanced, drained + out.finished)

    def _run(self, sched: ScheduledBatch, batch: ForwardBatch) -> StepOutput:
        logits = self.runner.forward(batch)
        if sched.mode is ForwardMode.TARGET_VERIFY:
            return self._verified(sched, logits)
        for rows in sched.prompt_rows:  # read now: a graph's logits are a view its next replay overwrites
            self._score_prompt(rows, logits)
        void = [req for req in sched.reqs if req.finished]  # overlap: finished while this step was in flight
        ready = self.scheduler.commit(sched)
        for req in void:  # its token is dropped; its slots were read by this step only, and now go
            self.scheduler.release(req)
        advanced = tuple(req.rid for req in sched.reqs if req not in void)
        if not ready:
            return StepOutput(sched.mode, advanced)
        finished = []
        sampling = []
        for req in ready:
            if req.sampling.max_new_tokens:
                sampling.append(req)
            else:  # it only scored its prompt
                req.finish_reason = FinishReason.LENGTH
                self.scheduler.release(req)
                finished.append(self._output(req))
        if not sampling:
            return StepOutput(sched.mode, advanced, tuple(finished))
        # decode: one row per request; extend: the rows of requests that finished prefill (picked out of every row
        # of a prompt being scored)
        rows = logits if sched.sample_rows is None else logits[sched.sample_rows]
        if void and sched.sample_rows is None:
            rows = logits[[i for i, req in enumerate(sched.reqs) if req not in void]]
        tokens = sample(rows, sampling)
        for row, (req, token) in enumerate(zip(sampling, tokens)):
            if isinstance(token, SamplingFailure):  # this request fails alone; the batch goes on
                req.finish_reason, req.error = FinishReason.ERROR, token.message
                self._release_unless_launched(req)
                finished.append(self._output(req))
                continue
            if req.return_logits:
                req.step_logits.append(rows[row].clone())
            self._append_token(req, token)
            if req.finished:
                self._release_unless_launched(req)
                finished.append(self._output(req))
        return StepOutput(sched.mode, advanced, tuple(finished))

    def _release_unless_launched(self, req: Req) -> None:
        """A finished request gives back its KV, unless the step in flight reads it: then that step releases it
        (overlap.py, rule 3)."""
        if self._in_flight is None or req not in self._in_flight[0].reqs:
            self.scheduler.release(req)

    @seam("chunked-prompt-logprobs-from-prompt-start")
    @staticmethod
    def _prompt_targets(rows: PromptRows) -> list[int]:
        """The prompt tokens these rows predict: the row after position ``p`` scores token ``p + 1``, from the chunk's
        own first position (the row after the last prompt token predicts past the prompt: no target)."""
        return rows.req.prompt_ids[rows.position + 1 : rows.position + 1 + rows.count]

    @staticmethod
    def _score_prompt(rows: PromptRows, logits: torch.Tensor) -> None:
        """Score the prompt tokens these rows predict (``_prompt_targets``): the chosen token's log-softmax in float64,
        as the server's generated-token logprobs, and the request's top ``k``."""
        req = rows.req
        targets = Engine._prompt_targets(rows)
        if not targets:
            return
        logp = torch.log_softmax(logits[rows.first : rows.first + len(targets)].double(), -1)
        ids = torch.tensor(targets, dtype=torch.int64, device=logp.device)
        chosen = logp.gather(1, ids.unsqueeze(1)).squeeze(1).tolist()
        tops: list[tuple[tuple[int, float], ...]] = [()] * len(targets)
        if req.prompt_logprobs:
            values, top_ids = logp.topk(min(req.prompt_logprobs, logp.shape[-1]), dim=-1)
            tops = [tuple(zip(i, v)) for i, v in zip(top_ids.tolist(), values.tolist())]
        req.prompt_scores += [PositionLogprobs(t, c, top) for t, c, top in zip(targets, chosen, tops)]

    def _verified(self, sched: ScheduledBatch, logits: torch.Tensor) -> StepOutput:
        """Greedy verification: row ``i`` of a request's rows gives its next token after input ``i``; a draft is
        accepted while it equals the token the target gives before it. A request emits the accepted drafts
        and one token more, and keeps the KV of the inputs those came from."""
        kept, start = [], 0
        for req, width, drafts in zip(sched.reqs, sched.extend_lens, sched.drafts):
            emitted = 0
            for i in range(width):
                row = logits[start + i : start + i + 1]
                token = sample(row, [req])[0]
                if isinstance(token, SamplingFailure):  # this request fails alone; the batch goes on
                    req.finish_reason, req.error = FinishReason.ERROR, token.message
                    break
                if req.return_logits:
                    req.step_logits.append(row[0].clone())
                self._append_token(req, token)
                emitted += 1
                if req.finished or i == width - 1 or token != drafts[i]:
                    break
            kept.append(max(emitted, 1))  # the last token's KV is written even when its row failed
            self.spec_stats["drafts"] += len(drafts)
            self.spec_stats["accepted"] += max(emitted - 1, 0)
            start += width
        self.spec_stats["verifies"] += 1
        self.scheduler.commit_verify(sched, kept)
        finished = []
        for req in sched.reqs:
            if req.finished:
                self.scheduler.release(req)
                finished.append(self._output(req))
        return StepOutput(sched.mode, tuple(req.rid for req in sched.reqs), tuple(finished))

    def _append_token(self, req: Req, token: int) -> None:
        req.output_ids.append(token)
        params = req.sampling
        if not params.ignore_eos and token in self.eos_token_ids:
            req.finish_reason, req.matched_stop = FinishReason.STOP, token
        elif token in params.stop_token_ids:
            req.finish_reason, req.matched_stop = FinishReason.STOP, token
        elif params.stop and self.tokenizer is not None:
            text = self.tokenizer.decode(req.output_ids)
            hits = [(text.find(s), s) for s in params.stop if s in text]
            if hits:
                cut, stop = min(hits)
                req.finish_reason, req.matched_stop, req.text = FinishReason.STOP, stop, text[:cut]
                return
        if req.finish_reason is None and len(req.output_ids) >= params.max_new_tokens:
            req.finish_reason = FinishReason.LENGTH
        if req.finished and self.tokenizer is not None:  # stop strings returned above with the cut text
            req.text = self.tokenizer.decode(req.output_ids)

    def _output(self, req: Req) -> GenerateOutput:
        logits = None
        if req.return_logits:  # a request that generated nothing has no rows
            vocab = self.model_config.vocab_size
            logits = (
                torch.stack(req.step_logits) if req.step_logits else torch.empty((0, vocab), device=self.runner.device)
            )
        prompt_logprobs = None
        if req.prompt_logprobs is not None:
            assert len(req.prompt_scores) == len(req.prompt_ids) - 1, "every prompt token but the first is scored"
            prompt_logprobs = (None, *req.prompt_scores)
        self._hits["prompt_tokens"] += len(req.prompt_ids)
        self._hits["cached_tokens"] += req.cached_tokens
        return GenerateOutput(
            req.rid,
            prompt_ids=req.prompt_ids,
            output_ids=req.output_ids,
            text=req.text,
            finish_reason=req.finish_reason,
            matched_stop=req.matched_stop,
            logits=logits,
            error=req.error,
            cached_tokens=req.cached_tokens,
            prompt_logprobs=prompt_logprobs,
        )

    def run_until_done(self) -> list[GenerateOutput]:
        outputs = []
        while self.has_work():
            outputs += self.step().finished
        return outputs

    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        sampling: SamplingParams | Sequence[SamplingParams] = SamplingParams(),
    ) -> list[GenerateOutput]:
        """Generate for every prompt (batched continuously); results in prompt order."""
        params = [sampling] * len(prompts) if isinstance(sampling, SamplingParams) else list(sampling)
        if len(params) != len(prompts):
            raise RequestError(f"{len(prompts)} prompts but {len(params)} sampling params")
        reqs = [self.add_request(p, s) for p, s in zip(prompts, params)]
        by_rid = {o.rid: o for o in self.run_until_done()}
        return [by_rid[r.rid] for r in reqs]

    def teacher_forced_logits(self, sequences: Sequence[tuple[Sequence[int], Sequence[int]]]) -> list[torch.Tensor]:
        """For each (prompt, continuation): logits ``[len(continuation), vocab]`` predicting each
        continuation token, with the continuation fed through the decode path (graphs included)."""
        reqs = [self.add_request(p, forced_output_ids=c, return_logits=True) for p, c in sequences]
        by_rid = {o.rid: o for o in self.run_until_done()}
        return [by_rid[r.rid].logits for r in reqs]

    def abort_all(self) -> list[Req]:
        """Drop every request in flight, e.g. after ``step`` raised; the engine then serves new ones."""
        self.runner.pool.invalidate_loc_cache()
        self._in_flight, self._drained = None, []
        return self.scheduler.abort_all()

    # -- accounting ------------------------------------------------------------------------------

    def pools_idle(self) -> bool:
        """No request holds anything: every request row is free, and every slot of both pools is free or the
        prefix cache's, unlocked (``flush_cache`` gives those back too)."""
        alloc, cache = self.runner.allocator, self.tree_cache
        full, swa = (cache.evictable_size(), cache.swa_evictable_size()) if cache is not None else (0, 0)
        locked = cache is not None and (cache.protected_size() or cache.swa_protected_size())
        return (
            not locked
            and alloc.full_available_size() + full == alloc.size
            and alloc.swa_available_size() + swa == alloc.size_swa
            and self.runner.req_to_token_pool.available_size() == self.runner.req_to_token_pool.size
        )

    def flush_cache(self) -> bool:
        """Give everything the prefix cache holds back to the pools (SGLang's ``/flush_cache``); False, and
        nothing flushed, while requests are in flight."""
        if self.scheduler.has_work():
            return False
        if self.tree_cache is not None:
            self.tree_cache.reset()
        return True

    def cache_stats(self) -> CacheStats:
        """What the prefix cache holds now and has served (the server's ``/health`` reports it)."""
        cache = self.tree_cache
        if cache is None:
            return CacheStats(enabled=False)
        return CacheStats(
            True,
            tokens=cache.evictable_size() + cache.protected_size(),
            swa_tokens=cache.swa_evictable_size() + cache.swa_protected_size(),
            **self._hits,
            evicted_tokens=self.scheduler.evicted.full,
            swa_evicted_tokens=self.scheduler.evicted.swa,
            swa_tombstoned_tokens=self.scheduler.evicted.tombstoned,
        )
