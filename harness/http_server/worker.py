"""EngineWorker: the one thread that owns the Engine, fed by HTTP handlers on an asyncio loop.

The Engine is not thread-safe, so every engine call (``add_request``, ``step``, ``abort_all``) happens
on the worker thread. Handlers submit a job (one or more prompts sharing one set of sampling
parameters) through a thread-safe queue and await an asyncio future; the worker adds newly
submitted jobs between steps, so requests that arrive while the engine is busy join the running
batch (continuous batching by the engine's own scheduler), steps while there is work, and sleeps on
the queue when idle. Results go back with ``loop.call_soon_threadsafe``.

If ``engine.step()`` raises, every request in flight fails with ``EngineFailure`` (HTTP 500), the
engine drops them with ``abort_all()`` and the worker keeps serving the next requests. A request
that fails alone (its sampling: ``FinishReason.ERROR``) fails only its own job, with ``RequestFailed``.
A job whose awaiting handler is cancelled (the client disconnected) is cancelled in the engine,
which frees its slots at once.

A streaming job (``stream``) gets its progress as the engine makes it: after every step, each of its
prompts that gained tokens sends them (``NewTokens``), and each that finished sends its output
(``Finished``), batched per job per step, so the engine thread only slices token lists and never
decodes text for a stream (the handler does, off the engine thread). Leaving the iteration early
(the client went away) cancels the job as above.

The counters and the pool occupancy that /health reports are updated before a job's result is
handed back, so a client that reads /health after its answer sees that answer counted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.engine import Engine, ForwardMode, GenerateOutput, RequestError, SamplingParams
from harness.engine.engine import CacheStats
from harness.engine.request import Req
from harness.http_server.protocol import Prompt

logger = logging.getLogger(__name__)


class WorkerError(RuntimeError):
    """A request the worker could not complete for a reason other than its own content."""


class EngineFailure(WorkerError):
    """``engine.step()`` raised while the request was in flight (HTTP 500)."""


class WorkerStopped(WorkerError):
    """The worker is stopped or stopping (HTTP 503)."""


class RequestFailed(EngineFailure):
    """One request of the job failed alone in the engine (e.g. its sampling); the others were unaffected."""


@dataclass(frozen=True)
class PoolUse:
    """Slots (or request rows) in use, out of the pool's size."""

    used: int
    size: int


@dataclass(frozen=True)
class PoolOccupancy:
    """What requests hold right now (full-attention slots, SWA slots, request rows), and what the prefix cache
    holds and has served (its slots are not counted as used: it gives them up on demand)."""

    full: PoolUse
    swa: PoolUse
    req_rows: PoolUse
    prefix_cache: CacheStats

    @property
    def idle(self) -> bool:
        return self.full.used == 0 and self.swa.used == 0 and self.req_rows.used == 0

    @classmethod
    def of(cls, engine: Engine) -> PoolOccupancy:
        """Read on the worker thread, which owns the engine."""
        alloc, rows, cache = engine.runner.allocator, engine.runner.req_to_token_pool, engine.cache_stats()
        return cls(
            PoolUse(alloc.size - alloc.full_available_size() - cache.tokens, alloc.size),
            PoolUse(alloc.size_swa - alloc.swa_available_size() - cache.swa_tokens, alloc.size_swa),
            PoolUse(rows.size - rows.available_size(), rows.size),
            cache,
        )

    def as_dict(self) -> dict[str, Any]:
        cache = {**dataclasses.asdict(self.prefix_cache), "hit_rate": round(self.prefix_cache.hit_rate, 4)}
        return {**dataclasses.asdict(self), "prefix_cache": cache, "idle": self.idle}


@dataclass
class WorkerStats:
    """Counters for /health and for tests that need to prove batching happened."""

    requests_served: int = 0  # prompts that finished with a result
    requests_failed: int = 0  # prompts refused (RequestError) or lost to an engine failure
    requests_cancelled: int = 0  # prompts dropped because their client went away
    jobs_served: int = 0  # HTTP-level jobs resolved with results
    steps: int = 0  # engine.step() calls that ran a forward
    engine_failures: int = 0  # engine.step() calls that raised
    max_batch_size: int = 0  # most requests advanced by one step (prefill or decode)
    max_decode_batch_size: int = 0  # most requests in one decode step: > 1 proves batching
    generated_tokens: int = 0
    engine_busy_s: float = 0.0  # wall time inside engine.step(): the engine's share of a run
    running: int = 0  # requests in the engine right now (queued inside it or running)
    forward_paths: dict[str, int] = field(default_factory=dict)  # forwards per path: decode/extend x graph/eager
    started_at: float = field(default_factory=time.time)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class NewTokens:
    """Tokens that prompt ``index`` of a streaming job generated in one engine step; it is still running."""

    index: int
    new_ids: tuple[int, ...]


@dataclass(frozen=True)
class Finished:
    """Prompt ``index`` of a streaming job is done: ``output`` is what ``generate`` returns for it (its text final,
    cut at a stop string; ``output_ids`` all of its tokens, those sent in NewTokens included)."""

    index: int
    output: GenerateOutput


StreamEvent = NewTokens | Finished


@dataclass
class _Job:
    """One submission: its prompts' results fill ``outputs`` in order; the future gets the list, or, for a
    streaming job, ``events`` gets each step's events and then the end (``_END`` or the error)."""

    prompts: list[Prompt]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[GenerateOutput]] | None
    return_logits: bool = False  # each output carries its per-token logits (the API's logprobs)
    prompt_logprobs: int | None = None  # each output scores its prompt, with this many top logprobs (the API's echo)
    events: asyncio.Queue[list[StreamEvent] | object] | None = None
    outputs: list[GenerateOutput | None] = field(default_factory=list)
    remaining: int = 0
    done: bool = False

    @property
    def abandoned(self) -> bool:
        """Cancelled by its handler before the worker admitted it (a stream says so with a _Cancel, queued after it)."""
        return self.done or (self.future is not None and self.future.done())

    def publish(self, events: list[StreamEvent]) -> None:
        """A streaming job's progress in one step, handed to its loop (the engine thread never waits on it)."""
        if self.events is not None and events and not self.done:
            self._call(self.events.put_nowait, events)

    def resolve(self, result: list[GenerateOutput] | None = None, error: BaseException | None = None) -> None:
        if self.done:
            return
        self.done = True
        if self.events is not None:
            self._call(self.events.put_nowait, _END if error is None else error)
        else:
            self._call(_settle, self.future, result, error)

    def _call(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the submitting loop is closed: nobody is waiting any more
            pass


def _settle(future: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if future.done():  # cancelled, e.g. the client went away
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


@dataclass
class _Entry:
    job: _Job
    index: int
    req: Req
    published: int = 0  # a streaming job's: output tokens already sent in NewTokens events


@dataclass(frozen=True)
class _Cancel:
    """The handler awaiting ``job`` went away: drop whatever of it is still in the engine."""

    job: _Job


@dataclass(frozen=True)
class _Flush:
    """Empty the prefix cache on the engine thread (SGLang's ``/flush_cache``); the future says whether it did."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future

    def resolve(self, flushed: bool = False, error: BaseException | None = None) -> None:
        try:
            self.loop.call_soon_threadsafe(_settle, self.future, flushed, error)
        except RuntimeError:  # the submitting loop is closed: nobody is waiting any more
            pass


_STOP = object()
_END = object()  # a streaming job's last item when it succeeded


class EngineWorker:
    """Owns one Engine on a dedicated thread; ``await worker.generate(prompts, params)`` from any loop.

    ``engine`` may be an Engine or a zero-argument factory; a factory builds the engine on the worker
    thread itself, so that everything (CUDA graph capture included) happens on the owning thread.
    """

    def __init__(self, engine: Engine | Callable[[], Engine], *, name: str = "swa-engine-worker") -> None:
        self._factory: Callable[[], Engine] | None = None if isinstance(engine, Engine) else engine
        self.engine: Engine | None = engine if isinstance(engine, Engine) else None
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None
        self._stopping = False
        self._lock = threading.Lock()
        self._stats = WorkerStats()
        self._inflight: dict[int, _Entry] = {}
        self._unadmitted: list[_Job | _Flush] = []  # drained from the queue together with the stop request
        self._pools: PoolOccupancy | None = None  # last snapshot taken on the engine thread

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, timeout: float | None = None) -> EngineWorker:
        """Start the thread and wait until the engine exists; re-raises the factory's error."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"engine was not ready after {timeout} s")
        if self._startup_error is not None:
            raise RuntimeError(f"engine failed to start: {self._startup_error}") from self._startup_error
        return self

    def stop(self, timeout: float | None = 30.0) -> None:
        """Fail whatever is queued or running with WorkerStopped and join the thread."""
        if self._stopping:
            return
        self._stopping = True
        self._queue.put(_STOP)
        if self._thread.is_alive():
            self._thread.join(timeout)
            if self._thread.is_alive():
                logger.warning("engine worker did not stop within %s s", timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stopping

    def __enter__(self) -> EngineWorker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stats(self) -> WorkerStats:
        """A consistent copy of the counters."""
        with self._lock:
            return dataclasses.replace(self._stats)

    def pools(self) -> PoolOccupancy | None:
        """Pool occupancy as of the engine thread's last change (None before the engine exists)."""
        with self._lock:
            return self._pools

    # -- submission (any thread with a running asyncio loop) -------------------------------------

    async def generate(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams,
        return_logits: bool = False,
        prompt_logprobs: int | None = None,
    ) -> list[GenerateOutput]:
        """Results for ``prompts`` in order (with their logits, and their prompts scored, when asked: see
        ``Engine.add_request``). Raises RequestError (the request can never be served), EngineFailure (the engine
        failed while it ran) or WorkerStopped."""
        if not prompts:
            raise RequestError("no prompts")
        loop = asyncio.get_running_loop()
        job = _Job(
            prompts=list(prompts),
            params=params,
            loop=loop,
            future=loop.create_future(),
            return_logits=return_logits,
            prompt_logprobs=prompt_logprobs,
        )
        self._submit(job)
        try:
            return await job.future
        except asyncio.CancelledError:  # the client went away: free the engine's slots for the others
            self._queue.put(_Cancel(job))
            raise

    async def stream(self, prompts: Sequence[Prompt], params: SamplingParams) -> AsyncIterator[list[StreamEvent]]:
        """The events of ``prompts`` as the engine makes them: lists of NewTokens and Finished (what arrived since
        the last item, in order); every prompt ends with one Finished. Raises as ``generate`` does: RequestError
        before any event when the job can never be served. Leaving early (``aclose``, or a cancelled consumer)
        cancels what is still in the engine; wrap the iteration in ``contextlib.aclosing``, so that this happens
        at once and not when the generator is collected."""
        if not prompts:
            raise RequestError("no prompts")
        loop = asyncio.get_running_loop()
        job = _Job(prompts=list(prompts), params=params, loop=loop, future=None, events=asyncio.Queue())
        events = job.events
        assert events is not None
        self._submit(job)
        ended = False
        try:
            while not ended:
                batch: list[StreamEvent] = []
                item = await events.get()
                while isinstance(item, list):  # take what else is already there: a slow reader catches up at once
                    batch += item
                    item = events.get_nowait() if not events.empty() else None
                if batch:
                    yield batch
                if item is _END:
                    ended = True
                elif isinstance(item, BaseException):
                    ended = True
                    raise item
        finally:
            if not ended:  # the consumer left (disconnect): free the engine's slots for the others
                self._queue.put(_Cancel(job))

    def _submit(self, job: _Job) -> None:
        with self._lock:  # pairs with _shutdown: a job is either drained there or never queued
            if self._stopping or not self._thread.is_alive():
                raise WorkerStopped("the engine worker is not running")
            self._queue.put(job)

    async def flush_cache(self) -> bool:
        """Empty the prefix cache; False, and nothing flushed, while requests are queued or running (as SGLang)."""
        loop = asyncio.get_running_loop()
        flush = _Flush(loop, loop.create_future())
        with self._lock:
            if self._stopping or not self._thread.is_alive():
                raise WorkerStopped("the engine worker is not running")
            self._queue.put(flush)
        return await flush.future

    # -- the engine thread -----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self.engine is None:
                assert self._factory is not None
                self.engine = self._factory()
        except BaseException as exc:  # noqa: BLE001 - reported to start()
            logger.error("engine construction failed: %s: %s", type(exc).__name__, exc)  # start() reports it, once
            logger.debug("engine construction traceback", exc_info=True)  # --log-level debug shows where
            self._startup_error = exc
            self._ready.set()
            return
        self._snapshot_pools()
        self._ready.set()
        try:
            self._loop()
        finally:
            self._shutdown()

    def _loop(self) -> None:
        engine = self.engine
        assert engine is not None
        while True:
            # Idle: sleep on the queue. Busy: only pick up what arrived during the last step.
            items = [self._queue.get()] if not engine.has_work() else []
            while True:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            for i, item in enumerate(items):
                if item is _STOP:
                    self._unadmitted = [j for j in items[i + 1 :] if isinstance(j, (_Job, _Flush))]
                    return
                if isinstance(item, _Cancel):
                    self._cancel(item.job)
                elif isinstance(item, _Flush):
                    self._flush(item)
                else:
                    self._admit(item)
            if engine.has_work():
                self._step()

    def _admit(self, job: _Job) -> None:
        """Add every prompt of ``job`` to the engine, or none of them."""
        engine = self.engine
        assert engine is not None
        if job.abandoned:  # cancelled before the worker saw it
            return
        added: list[Req] = []
        try:
            for i, prompt in enumerate(job.prompts):
                try:
                    added.append(
                        engine.add_request(
                            prompt, job.params, return_logits=job.return_logits, prompt_logprobs=job.prompt_logprobs
                        )
                    )
                except RequestError as exc:
                    where = f"prompt[{i}]: " if len(job.prompts) > 1 else ""
                    raise RequestError(f"{where}{exc}") from exc
        except Exception as exc:  # noqa: BLE001 - goes back to the client
            # Not admitted yet (admission happens inside step): cancelling them frees nothing but the queue.
            for req in added:
                engine.cancel(req)
            with self._lock:
                self._stats.requests_failed += len(job.prompts)
            if not isinstance(exc, RequestError):
                logger.exception("add_request failed")
                exc = EngineFailure(f"could not queue the request: {type(exc).__name__}: {exc}")
            job.resolve(error=exc)
            return
        job.outputs = [None] * len(added)
        job.remaining = len(added)
        for i, req in enumerate(added):
            self._inflight[req.rid] = _Entry(job=job, index=i, req=req)
        with self._lock:
            self._stats.running = len(self._inflight)

    def _flush(self, flush: _Flush) -> None:
        engine = self.engine
        assert engine is not None
        flushed = engine.flush_cache()  # False while any request is queued or running
        if flushed:
            self._snapshot_pools()
        flush.resolve(flushed)

    def _cancel(self, job: _Job) -> None:
        """Drop ``job``'s requests from the engine (queued or running): their slots are free at once."""
        engine = self.engine
        assert engine is not None
        dropped = len(self._drop_job(job))
        job.done = True
        if dropped:
            logger.info("client went away: cancelled %d request(s)", dropped)
        with self._lock:
            self._stats.requests_cancelled += dropped
            self._stats.running = len(self._inflight)
            self._pools = PoolOccupancy.of(engine)

    def _drop_job(self, job: _Job) -> list[int]:
        """Cancel every request of ``job`` still in flight; their rids."""
        engine = self.engine
        assert engine is not None
        entries = [e for e in self._inflight.values() if e.job is job]
        for entry in entries:
            del self._inflight[entry.req.rid]
            engine.cancel(entry.req)
        return [e.req.rid for e in entries]

    def _snapshot_pools(self) -> None:
        if self.engine is not None:
            occupancy = PoolOccupancy.of(self.engine)
            with self._lock:
                self._pools = occupancy

    def _step(self) -> None:
        engine = self.engine
        assert engine is not None
        started = time.perf_counter()
        try:
            step = engine.step()
        except Exception as exc:  # noqa: BLE001 - the server must survive a failed forward
            self._fail_inflight(exc)
            return
        busy = time.perf_counter() - started
        new_tokens = served = failed = 0
        settle: list[tuple[_Job, list[GenerateOutput] | None, BaseException | None]] = []
        dropped: set[int] = set()  # siblings of a failed request, counted as failed with it
        events: dict[int, tuple[_Job, list[StreamEvent]]] = {}  # streaming jobs' progress in this step, by id(job)
        for out in step.finished:
            entry = self._inflight.pop(out.rid, None)
            if entry is None:
                if out.rid not in dropped:
                    logger.warning("engine finished unknown request %d", out.rid)
                continue
            job = entry.job
            new_tokens += len(out.output_ids)
            if out.error is not None:  # this request failed alone: its job fails, its siblings are dropped
                logger.error("request %d failed: %s", out.rid, out.error)
                siblings = self._drop_job(job)
                dropped.update(siblings)
                failed += 1 + len(siblings)
                settle.append((job, None, RequestFailed(f"the request failed in the engine: {out.error}")))
                continue
            served += 1
            job.outputs[entry.index] = out
            job.remaining -= 1
            if job.events is not None:
                events.setdefault(id(job), (job, []))[1].append(Finished(entry.index, out))
            if job.remaining == 0:
                settle.append((job, list(job.outputs), None))  # type: ignore[arg-type]
        self._progress(step.advanced, events)
        pools = PoolOccupancy.of(engine)
        with self._lock:  # counted before anyone is answered
            s = self._stats
            s.steps += 1
            s.engine_busy_s += busy
            s.max_batch_size = max(s.max_batch_size, len(step.advanced))
            if step.mode is ForwardMode.DECODE:
                s.max_decode_batch_size = max(s.max_decode_batch_size, len(step.advanced))
            s.requests_served += served
            s.requests_failed += failed
            s.generated_tokens += new_tokens
            s.jobs_served += sum(error is None for _, _, error in settle)
            s.running = len(self._inflight)
            s.forward_paths = dict(engine.runner.paths)  # copied on the engine thread, which owns the counter
            self._pools = pools
        for job, batch in events.values():  # before the end of the job, which follows its last Finished
            job.publish(batch)
        for job, result, error in settle:
            job.resolve(result=result, error=error)

    def _progress(self, advanced: Sequence[int], events: dict[int, tuple[_Job, list[StreamEvent]]]) -> None:
        """Add a NewTokens for each running request of a streaming job that gained tokens in this step."""
        for rid in advanced:
            entry = self._inflight.get(rid)  # finished and dropped requests are gone from it
            if entry is None or entry.job.events is None:
                continue
            new = entry.req.output_ids[entry.published :]
            if new:
                entry.published += len(new)
                events.setdefault(id(entry.job), (entry.job, []))[1].append(NewTokens(entry.index, tuple(new)))

    def _fail_inflight(self, exc: Exception) -> None:
        engine = self.engine
        assert engine is not None
        jobs = {id(e.job): e.job for e in self._inflight.values()}
        logger.error(
            "engine.step() failed; failing %d request(s) in %d job(s)", len(self._inflight), len(jobs), exc_info=exc
        )
        error = EngineFailure(f"engine step failed: {type(exc).__name__}: {exc}")
        lost = len(self._inflight)
        self._inflight.clear()
        try:
            engine.abort_all()
        except Exception:  # noqa: BLE001 - keep serving; the next step will tell
            logger.exception("engine.abort_all() failed after a failed step")
        pools = PoolOccupancy.of(engine)
        with self._lock:
            self._stats.engine_failures += 1
            self._stats.requests_failed += lost
            self._stats.running = 0
            self._pools = pools
        for job in jobs.values():
            job.resolve(error=error)

    def _shutdown(self) -> None:
        """Fail everything still queued or in flight; nobody will step the engine again."""
        with self._lock:
            self._stopping = True
        error = WorkerStopped("the server is shutting down")
        jobs = {id(e.job): e.job for e in self._inflight.values()}
        jobs.update((id(j), j) for j in self._unadmitted if isinstance(j, _Job))
        for flush in (j for j in self._unadmitted if isinstance(j, _Flush)):
            flush.resolve(error=error)
        self._inflight.clear()
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Job):
                jobs[id(item)] = item
            elif isinstance(item, _Flush):
                item.resolve(error=error)
        for job in jobs.values():
            job.resolve(error=error)
        if self.engine is not None:
            try:
                self.engine.abort_all()
            except Exception:  # noqa: BLE001
                logger.exception("engine.abort_all() failed at shutdown")
