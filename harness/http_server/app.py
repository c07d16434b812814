"""The OpenAI-compatible aiohttp application over an EngineWorker.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``,
``GET /metrics`` (Prometheus text), ``POST /flush_cache``.
Every error is JSON in OpenAI's shape (see protocol.ApiError): 400 for a request that can never be
served (its field is named in ``param``), 500 when the engine failed while the request ran, 503 while
shutting down; the server keeps serving the next request either way.

Hostile input is the client's error and costs the others nothing:
* a request with an ``Origin`` that is not loopback is refused (403), and so is a POST body that is
  not ``application/json`` (415): a web page cannot post to the local server;
* bodies are capped (413), decoded as strict UTF-8, and JSON that nests too deep or holds a lone
  UTF-16 surrogate is a 400; prompts are capped in characters (protocol.Limits) before any work;
* tokenization runs in a thread pool with the GIL released (``releasing_gil``), never on the event
  loop, so /health answers while a long prompt is tokenized;
* a client that disconnects cancels its handler (``handler_cancellation``), which cancels its requests
  in the engine (see worker.EngineWorker.generate); a streamed answer's too, and a write that finds the
  connection gone ends it the same way.

``stream: true`` answers with Server-Sent Events (stream.py). Everything that can refuse a request (parsing,
tokenization, the context check, the engine's admission) happens before the 200 and its headers are sent, so
a refused streamed request gets the same 400 as a non-streamed one; the headers go out with the first text.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import ipaddress
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web
from tokenizers import Encoding
from yarl import URL

from harness.engine import GenerateOutput, RequestError
from harness.model import Tokenizer
from harness.http_server.chat import ChatRenderer
from harness.http_server.metrics import render as render_metrics
from harness.http_server.protocol import (
    ApiError,
    ChatMessage,
    GenerationFields,
    Limits,
    Prompt,
    StreamOptions,
    parse_chat,
    parse_completion,
    short_repr,
)
from harness.http_server.stream import DONE, StreamDiverged, TextStream, chat_chunk, completion_chunk, event
from harness.http_server.worker import EngineFailure, EngineWorker, Finished, StreamEvent, WorkerStopped

logger = logging.getLogger(__name__)

WORKER_KEY = web.AppKey("worker", EngineWorker)
STATE_KEY = web.AppKey("state", dict)
TOKENIZE_KEY = web.AppKey("tokenize", ThreadPoolExecutor)
MAX_BODY_BYTES = 16 * 1024 * 1024  # eval batches of long prompts; aiohttp's default is 1 MiB

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(worker: EngineWorker, model_name: str, *, build: Mapping[str, Any] | None = None) -> web.Application:
    """An application serving ``worker``'s engine as ``model_name``; the worker must be started.

    ``build`` identifies what answers (code, weights, fault...); /health reports it so that a client
    (the eval's resume cache) can tell two servers at the same address apart.
    """
    engine = worker.engine
    if engine is None:
        raise ValueError("start the EngineWorker before building the app (its engine does not exist yet)")
    if engine.tokenizer is None:
        raise ValueError(
            f"{engine.config.model_path} has no tokenizer.json: the OpenAI server takes and returns "
            "text, so it needs the checkpoint's tokenizer"
        )
    tokenizer = releasing_gil(engine.tokenizer)
    longest = max(map(len, engine.tokenizer.tokenizer.get_vocab()), default=1)
    app = web.Application(middlewares=[_errors, _guard], client_max_size=MAX_BODY_BYTES)
    app[WORKER_KEY] = worker
    app[TOKENIZE_KEY] = ThreadPoolExecutor(2, thread_name_prefix="swa-tokenize")
    app[STATE_KEY] = {
        "model": model_name,
        "limits": Limits.for_tokenizer(engine.max_context_len, engine.model_config.vocab_size, longest),
        "tokenizer": tokenizer,
        "chat": ChatRenderer.from_dir(engine.config.model_path, tokenizer),
        "graph_mode": engine.graph_mode,
        "build": dict(build or {}),
        "created": int(time.time()),
    }
    app.on_cleanup.append(_stop_tokenizer_pool)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/flush_cache", flush_cache, allow_head=False)
    app.router.add_post("/flush_cache", flush_cache)
    return app


async def _stop_tokenizer_pool(app: web.Application) -> None:
    app[TOKENIZE_KEY].shutdown(wait=False, cancel_futures=True)


class _EncodeReleasingGil:
    """``tokenizers.Tokenizer.encode`` holds the GIL for the whole call (about 1 s per MB), which stops
    the event loop's thread too; ``encode_batch`` releases it. Same pipeline, same ids."""

    def __init__(self, hf: Any) -> None:
        self._hf = hf

    def encode(self, text: str, add_special_tokens: bool = True) -> Encoding:
        return self._hf.encode_batch([text], add_special_tokens=add_special_tokens)[0]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._hf, name)


def releasing_gil(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of ``tokenizer`` whose encoding releases the GIL (its BOS rules unchanged)."""
    clone = copy.copy(tokenizer)
    clone.tokenizer = _EncodeReleasingGil(tokenizer.tokenizer)
    return clone


# -- handlers ------------------------------------------------------------------------------------


async def completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    req = parse_completion(await _json_body(request), state["limits"])
    _check_model(req.model, state["model"])
    prompts = await _off_loop(request, _encode_all, state["tokenizer"], req.prompts)
    _check_fits(prompts, req.gen, state["limits"], prompt_field="prompt")
    if req.stream is not None:
        return await _stream(request, prompts, req.gen, req.stream, chat=False)
    # echo with logprobs scores the prompt in the engine's prefill; so does max_tokens 0, which generates nothing
    scored = req.echo and (req.logprobs is not None or req.gen.max_tokens == 0)
    outputs = await _generate(
        request,
        prompts,
        req.gen.sampling(),
        prompt_field="prompt",
        return_logits=req.logprobs is not None,
        prompt_logprobs=(req.logprobs or 0) if scored else None,
    )
    echoed: list[str | None] = [None] * len(outputs)
    if req.echo:
        echoed = await _off_loop(request, _echo_texts, state["tokenizer"], req.prompts)
    logprobs = [None] * len(outputs)
    if req.logprobs is not None:
        logprobs = await _off_loop(
            request, _all_logprobs, state["tokenizer"], outputs, req.logprobs, req.by_token_id, echoed
        )
    choices = [
        {"text": (echo or "") + o.text, "index": i, "logprobs": lp, "finish_reason": _finish(o)}
        for i, (o, lp, echo) in enumerate(zip(outputs, logprobs, echoed))
    ]
    return web.json_response(
        {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": state["model"],
            "choices": choices,
            "usage": _usage(outputs),
        }
    )


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    req = parse_chat(await _json_body(request), state["limits"])
    _check_model(req.model, state["model"])
    prompt = await _off_loop(request, _chat_ids, state["chat"], state["tokenizer"], req.messages)
    _check_fits([prompt], req.gen, state["limits"], prompt_field="messages")
    if req.stream is not None:
        return await _stream(request, [prompt], req.gen, req.stream, chat=True)
    outputs = await _generate(request, [prompt], req.gen.sampling(), prompt_field="messages")
    out = outputs[0]
    return web.json_response(
        {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": state["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": out.text},
                    "logprobs": None,
                    "finish_reason": _finish(out),
                }
            ],
            "usage": _usage(outputs),
        }
    )


async def _stream(
    request: web.Request, prompts: list[list[int]], gen: GenerationFields, options: StreamOptions, *, chat: bool
) -> web.StreamResponse:
    """A streamed answer (stream.py): the 200 and its headers go out with the first events, so a job the engine
    refuses is still a plain 400; a failure after that is an error event and the stream ends without [DONE]."""
    state = request.app[STATE_KEY]
    head: dict[str, Any] = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": state["model"],
    }
    if options.include_usage:
        head["usage"] = None

    def chunk(index: int, text: str, finish_reason: str | None) -> dict[str, Any]:
        if chat:
            return chat_chunk(head, index, {"content": text} if text or finish_reason is None else {}, finish_reason)
        return completion_chunk(head, index, text, finish_reason)

    texts = [TextStream(state["tokenizer"], gen.stop) for _ in prompts]
    outputs: list[GenerateOutput | None] = [None] * len(prompts)
    response: web.StreamResponse | None = None
    try:
        async with contextlib.aclosing(request.app[WORKER_KEY].stream(prompts, gen.sampling())) as events:
            async for batch in events:
                if response is None:
                    response = web.StreamResponse(headers={"Cache-Control": "no-cache"})
                    response.content_type = "text/event-stream"
                    await response.prepare(request)
                    if chat:
                        await response.write(event(chat_chunk(head, 0, {"role": "assistant", "content": ""}, None)))
                pieces = await _off_loop(request, _stream_pieces, texts, batch)
                for index, text, out in pieces:
                    if out is not None:
                        outputs[index] = out
                    await response.write(event(chunk(index, text, None if out is None else _finish(out))))
    except RequestError as exc:  # the engine refused the job: nothing was sent yet
        raise ApiError(str(exc), param=_request_error_param(str(exc), "messages" if chat else "prompt")) from exc
    except (EngineFailure, WorkerStopped, StreamDiverged) as exc:
        if response is None:
            raise  # still a plain error response (the _errors middleware)
        status = 503 if isinstance(exc, WorkerStopped) else 500
        if isinstance(exc, StreamDiverged):
            logger.error("streamed text diverged: %s", exc)
        await _write_quietly(response, event(ApiError(str(exc), status=status, type="server_error").body()))
        return response
    except ConnectionResetError:  # the client went away mid-write; aclosing cancelled its requests
        assert response is not None
        return response
    assert response is not None and all(o is not None for o in outputs)
    if options.include_usage:
        await response.write(event({**head, "choices": [], "usage": _usage(outputs)}))  # type: ignore[arg-type]
    await response.write(DONE)
    await response.write_eof()
    return response


def _stream_pieces(texts: list[TextStream], batch: list[StreamEvent]) -> list[tuple[int, str, GenerateOutput | None]]:
    """Per event, its choice's new text (skipped while nothing settled) and, when it finished, its output. On the
    tokenizer pool: this decodes."""
    pieces = []
    for ev in batch:
        if isinstance(ev, Finished):
            pieces.append((ev.index, texts[ev.index].finish(ev.output.text), ev.output))
        elif text := texts[ev.index].advance(ev.new_ids):
            pieces.append((ev.index, text, None))
    return pieces


async def _write_quietly(response: web.StreamResponse, data: bytes) -> None:
    with contextlib.suppress(ConnectionResetError):
        await response.write(data)


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    return web.json_response(
        {
            "object": "list",
            "data": [
                {
                    "id": state["model"],
                    "object": "model",
                    "created": state["created"],
                    "owned_by": "swa-harness",
                    "max_model_len": state["limits"].max_context_len,
                    "graph_mode": state["graph_mode"],
                }
            ],
        }
    )


async def metrics(request: web.Request) -> web.Response:
    """The counters in Prometheus' text format (``harness.http_server.metrics``), as SGLang and vLLM serve theirs."""
    worker = request.app[WORKER_KEY]
    text = render_metrics(worker.stats(), worker.pools(), request.app[STATE_KEY]["model"])
    return web.Response(text=text, content_type="text/plain", charset="utf-8")


async def flush_cache(request: web.Request) -> web.Response:
    """Empty the prefix cache, as SGLang's ``/flush_cache`` does (GET or POST): 200 when it did; 409, nothing
    flushed, while requests are queued or running (a client replays on an empty cache only once the others end)."""
    if not await request.app[WORKER_KEY].flush_cache():
        raise ApiError("cache not flushed: requests are queued or running; retry when they finish", status=409)
    return web.json_response({"flushed": True})


async def health(request: web.Request) -> web.Response:
    """Identity (model, graph mode, build), counters and pool occupancy. The worker updates both before
    it answers a request, so they already include every response a client has received."""
    state = request.app[STATE_KEY]
    worker = request.app[WORKER_KEY]
    pools = worker.pools()
    limits: Limits = state["limits"]
    return web.json_response(
        {
            "status": "ok" if worker.alive else "stopped",
            "model": state["model"],
            "graph_mode": state["graph_mode"],
            "build": state["build"],
            "max_context_len": limits.max_context_len,
            "max_prompt_chars": limits.max_prompt_chars,
            "chat_template": state["chat"].source,
            "stats": worker.stats().as_dict(),
            "pools": pools.as_dict() if pools is not None else None,
        },
        status=200 if worker.alive else 503,
    )


# -- helpers -------------------------------------------------------------------------------------


# A \uD800-\uDFFF escape: only these can put a surrogate into a parsed string (strict UTF-8 refuses
# surrogates as bytes). Rare in practice (emoji escaped as pairs), so only then are the strings walked.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


async def _json_body(request: web.Request) -> Any:
    raw = await request.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(f"the request body is not valid UTF-8: {exc}") from exc
    try:
        body = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise ApiError("the request body is not acceptable JSON: it is nested too deeply") from None
    except ValueError as exc:
        raise ApiError(f"the request body is not valid JSON: {exc}") from exc
    if _SURROGATE_ESCAPE.search(raw):
        _refuse_lone_surrogates(body)
    return body


def _refuse_lone_surrogates(body: Any) -> None:
    """Every string (keys included) must be valid Unicode: a lone UTF-16 surrogate cannot be tokenized."""
    todo = [body]
    while todo:
        value = todo.pop()
        if isinstance(value, dict):
            todo += value.keys()
            todo += value.values()
        elif isinstance(value, list):
            todo += value
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ApiError(
                    f"the request body holds a lone UTF-16 surrogate ({short_repr(value[exc.start])}), "
                    "which is not valid Unicode"
                ) from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _check_model(requested: str | None, served: str) -> None:
    if requested is not None and requested != served:
        raise ApiError(
            f"model {short_repr(requested)} is not served here; this server serves {served!r}",
            param="model",
            status=404,
            code="model_not_found",
        )


async def _off_loop(request: web.Request, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on the tokenizer pool, so the event loop keeps serving meanwhile."""
    return await asyncio.get_running_loop().run_in_executor(request.app[TOKENIZE_KEY], fn, *args)


def _encode_all(tokenizer: Tokenizer, prompts: list[Prompt]) -> list[list[int]]:
    """Text prompts as token ids (token-id prompts as they are); the engine then never tokenizes."""
    return [tokenizer.encode(p) if isinstance(p, str) else p for p in prompts]


def _chat_ids(chat: ChatRenderer, tokenizer: Tokenizer, messages: Sequence[ChatMessage]) -> list[int]:
    """The chat template's rendering (or the plain fallback text) as token ids."""
    return _encode_all(tokenizer, [chat.prompt(messages)])[0]


async def _generate(
    request: web.Request,
    prompts: list,
    sampling: Any,
    *,
    prompt_field: str,
    return_logits: bool = False,
    prompt_logprobs: int | None = None,
) -> list[GenerateOutput]:
    try:
        return await request.app[WORKER_KEY].generate(prompts, sampling, return_logits, prompt_logprobs)
    except RequestError as exc:
        raise ApiError(str(exc), param=_request_error_param(str(exc), prompt_field)) from exc


def _check_fits(prompts: list[list[int]], gen: GenerationFields, limits: Limits, *, prompt_field: str) -> None:
    """OpenAI's context rule, as /v1/models reports it (``max_model_len``): prompt + max_tokens tokens must fit.
    A prompt that leaves room for at least one token is refused naming max_tokens, with the most that fits."""
    ctx = limits.max_context_len
    for i, ids in enumerate(prompts):
        need = len(ids) + gen.max_tokens
        if need <= ctx:
            continue
        where = f"prompt[{i}]: " if len(prompts) > 1 else ""
        asked = f"{gen.max_tokens_param} ({gen.max_tokens}{'' if gen.max_tokens_sent else ', the default'})"
        message = (
            f"{where}prompt ({len(ids)} tokens) + {asked} needs {need} tokens of context; this engine allows {ctx}"
        )
        if not gen.max_tokens:  # echo: the prompt alone is scored
            raise ApiError(f"{message}: the prompt does not fit", param=prompt_field)
        if len(ids) >= ctx:
            raise ApiError(f"{message}: the prompt leaves no room for a completion", param=prompt_field)
        raise ApiError(
            f"{message}: at most {ctx - len(ids)} new tokens fit after this prompt", param=gen.max_tokens_param
        )


def _request_error_param(message: str, prompt_field: str) -> str:
    """The engine's RequestError starts with the field it refuses; map that to the API's name.
    Everything else (too long for the context, empty, bad ids, no room in the pool) is the prompt's."""
    head = message.split(": ", 1)[1] if message.startswith("prompt[") else message
    for engine_name, api_name in (("max_new_tokens", "max_tokens"), ("temperature", "temperature"), ("stop", "stop")):
        if head.startswith(engine_name):
            return api_name
    return prompt_field


def _finish(out: GenerateOutput) -> str:
    return str(getattr(out.finish_reason, "value", out.finish_reason))


def _echo_texts(tokenizer: Tokenizer, prompts: list[Prompt]) -> list[str]:
    """What ``echo`` puts before each completion: a text prompt as it was sent, a token-id prompt decoded (special
    tokens skipped, as completions are)."""
    return [p if isinstance(p, str) else tokenizer.decode(p) for p in prompts]


def _all_logprobs(
    tokenizer: Any, outputs: list[GenerateOutput], top: int, by_id: bool, echoed: Sequence[str | None]
) -> list[dict[str, Any]]:
    return [_logprobs(tokenizer, o, top, by_id, echo) for o, echo in zip(outputs, echoed)]


def _logprobs(tokenizer: Any, out: GenerateOutput, top: int, by_id: bool, echo: str | None = None) -> dict[str, Any]:
    """A completion choice's ``logprobs`` as OpenAI's legacy completions return them: per generated token its text,
    its logprob, the ``top`` largest of the full softmax (keyed by text, or ``token_id:N`` with vLLM's
    ``return_tokens_as_token_ids``, where two tokens that decode alike would collide) and its offset in the text.

    With ``echo`` (the prompt's text, which the choice's text starts with) the prompt's tokens come first, scored by
    the engine's prefill (``GenerateOutput.prompt_logprobs``): the first one's logprob and top logprobs are null, as
    OpenAI and vLLM give them (nothing comes before it), and the generated tokens' offsets are past the prompt."""
    import torch

    assert out.logits is not None and len(out.logits) == len(out.output_ids)
    logp = torch.log_softmax(out.logits.double(), -1)
    name = (lambda t: f"token_id:{t}") if by_id else (lambda t: tokenizer.decode([t], skip_special_tokens=False))
    tokens: list[str] = []
    chosen: list[float | None] = []
    tops: list[dict[str, float] | None] = []
    offsets: list[int] = []
    if echo is not None:
        scored = out.prompt_logprobs
        assert scored is not None and len(scored) == len(out.prompt_ids)
        tokens += [name(t) for t in out.prompt_ids]
        chosen += [None if p is None else p.logprob for p in scored]
        if top:
            tops += [None if p is None else {name(i): v for i, v in p.top} for p in scored]
        # the decoded prompt before each token, as the echoed text is decoded (a text prompt's own text when the
        # tokenizer decodes it back unchanged; never past it)
        offsets += [min(len(tokenizer.decode(out.prompt_ids[:k])), len(echo)) for k in range(len(out.prompt_ids))]
    shift = len(echo or "")
    tokens += [name(t) for t in out.output_ids]
    # where each token starts in the text: the decoded prefix's length (per-token pieces need not concatenate to the
    # text, e.g. a word-level tokenizer joins words with spaces)
    offsets += [
        shift + len(tokenizer.decode(out.output_ids[:k], skip_special_tokens=False)) for k in range(len(out.output_ids))
    ]
    chosen += logp.gather(1, torch.tensor(out.output_ids).unsqueeze(1)).squeeze(1).tolist() if out.output_ids else []
    if top and out.output_ids:
        values, ids = logp.topk(top, dim=-1)
        tops += [{name(i): v for i, v in zip(row_ids, row)} for row_ids, row in zip(ids.tolist(), values.tolist())]
    return {"tokens": tokens, "token_logprobs": chosen, "top_logprobs": tops, "text_offset": offsets}


def _usage(outputs: list[GenerateOutput]) -> dict[str, Any]:
    """OpenAI's usage, with the prompt tokens the prefix cache served in ``prompt_tokens_details.cached_tokens``."""
    prompt = sum(len(o.prompt_ids) for o in outputs)
    completion = sum(len(o.output_ids) for o in outputs)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(o.cached_tokens for o in outputs)},
    }


def _local_origin(origin: str) -> bool:
    """An Origin a browser sends for a page served from this machine (loopback or localhost)."""
    try:
        host = URL(origin).host
    except ValueError:
        return False
    if not host:  # "null" (sandboxed frames, file:// pages) and garbage
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Only local pages and API clients: a foreign Origin is refused (403), POST bodies must be JSON (415).
    Browsers post text/plain and forms cross-site without asking first; application/json needs a CORS
    preflight, which this server never grants."""
    origin = request.headers.get("Origin")
    if origin is not None and not _local_origin(origin):
        raise ApiError(
            f"requests from web pages at Origin {short_repr(origin)} are refused: this server accepts "
            "only local origins",
            status=403,
            type="permission_error",
        )
    if request.method == "POST" and request.content_type != "application/json":
        sent = request.headers.get("Content-Type")
        raise ApiError(f"Content-Type must be application/json, got {short_repr(sent) if sent else 'none'}", status=415)
    return await handler(request)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every failure becomes a JSON error; nothing leaves the server as an HTML page or a dropped socket."""
    try:
        return await handler(request)
    except ApiError as exc:
        return web.json_response(exc.body(), status=exc.status)
    except EngineFailure as exc:
        return web.json_response(ApiError(str(exc), status=500, type="server_error").body(), status=500)
    except WorkerStopped as exc:
        return web.json_response(ApiError(str(exc), status=503, type="server_error").body(), status=503)
    except web.HTTPException as exc:  # 404 unknown route, 405 wrong method, 413 body too large
        if exc.status < 400:
            raise
        kind = "invalid_request_error" if exc.status < 500 else "server_error"
        detail = f"{exc.reason}: {exc.text}" if exc.status == 413 else exc.reason  # names the size limit
        body = ApiError(f"{detail}: {request.method} {request.path}", status=exc.status, type=kind).body()
        return web.json_response(body, status=exc.status)
    except Exception as exc:  # noqa: BLE001 - a bug here must not take the server down
        logger.exception("unhandled error in %s %s", request.method, request.path)
        body = ApiError(f"internal error: {type(exc).__name__}: {exc}", status=500, type="server_error").body()
        return web.json_response(body, status=500)
