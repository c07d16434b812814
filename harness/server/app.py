"""The OpenAI-compatible aiohttp application over an EngineWorker.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``.
Every error is JSON in OpenAI's shape (see protocol.ApiError): 400 for a request that can never be
served (its field is named in ``param``), 500 when the engine failed while the request ran, 503 while
shutting down; the server keeps serving the next request either way.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from harness.engine import GenerateOutput, RequestError
from harness.server.chat import ChatRenderer
from harness.server.protocol import ApiError, Limits, parse_chat, parse_completion
from harness.server.worker import EngineFailure, EngineWorker, WorkerStopped

logger = logging.getLogger(__name__)

WORKER_KEY = web.AppKey("worker", EngineWorker)
STATE_KEY = web.AppKey("state", dict)
MAX_BODY_BYTES = 64 * 1024 * 1024  # eval batches of long prompts; aiohttp's default is 1 MiB

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(worker: EngineWorker, model_name: str) -> web.Application:
    """An application serving ``worker``'s engine as ``model_name``; the worker must be started."""
    engine = worker.engine
    if engine is None:
        raise ValueError("start the EngineWorker before building the app (its engine does not exist yet)")
    if engine.tokenizer is None:
        raise ValueError(f"{engine.config.model_path} has no tokenizer.json: the OpenAI server takes and returns "
                         "text, so it needs the checkpoint's tokenizer")
    app = web.Application(middlewares=[_errors], client_max_size=MAX_BODY_BYTES)
    app[WORKER_KEY] = worker
    app[STATE_KEY] = {
        "model": model_name,
        "limits": Limits(max_context_len=engine.max_context_len, vocab_size=engine.model_config.vocab_size),
        "chat": ChatRenderer.from_dir(engine.config.model_path, engine.tokenizer),
        "graph_mode": engine.graph_mode,
        "created": int(time.time()),
    }
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    return app


# -- handlers ------------------------------------------------------------------------------------


async def completions(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    req = parse_completion(await _json_body(request), state["limits"])
    _check_model(req.model, state["model"])
    outputs = await _generate(request, req.prompts, req.gen.sampling(), prompt_field="prompt")
    choices = [{"text": o.text, "index": i, "logprobs": None, "finish_reason": _finish(o)}
               for i, o in enumerate(outputs)]
    return web.json_response({
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": state["model"],
        "choices": choices,
        "usage": _usage(outputs),
    })


async def chat_completions(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    req = parse_chat(await _json_body(request), state["limits"])
    _check_model(req.model, state["model"])
    prompt = state["chat"].prompt(req.messages)
    outputs = await _generate(request, [prompt], req.gen.sampling(), prompt_field="messages")
    out = outputs[0]
    return web.json_response({
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": state["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": out.text}, "logprobs": None,
                     "finish_reason": _finish(out)}],
        "usage": _usage(outputs),
    })


async def models(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    return web.json_response({"object": "list", "data": [{
        "id": state["model"],
        "object": "model",
        "created": state["created"],
        "owned_by": "swa-harness",
        "max_model_len": state["limits"].max_context_len,
    }]})


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    worker = request.app[WORKER_KEY]
    return web.json_response({
        "status": "ok" if worker.alive else "stopped",
        "model": state["model"],
        "graph_mode": state["graph_mode"],
        "max_context_len": state["limits"].max_context_len,
        "chat_template": state["chat"].source,
        "stats": worker.stats().as_dict(),
    }, status=200 if worker.alive else 503)


# -- helpers -------------------------------------------------------------------------------------


async def _json_body(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ApiError(f"the request body is not valid JSON: {exc}") from exc


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _check_model(requested: str | None, served: str) -> None:
    if requested is not None and requested != served:
        raise ApiError(f"model {requested!r} is not served here; this server serves {served!r}",
                       param="model", status=404, code="model_not_found")


async def _generate(request: web.Request, prompts: list, sampling: Any, *, prompt_field: str) -> list[GenerateOutput]:
    try:
        return await request.app[WORKER_KEY].generate(prompts, sampling)
    except RequestError as exc:
        raise ApiError(str(exc), param=_request_error_param(str(exc), prompt_field)) from exc


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


def _usage(outputs: list[GenerateOutput]) -> dict[str, int]:
    prompt = sum(len(o.prompt_ids) for o in outputs)
    completion = sum(len(o.output_ids) for o in outputs)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


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
        body = ApiError(f"{exc.reason}: {request.method} {request.path}", status=exc.status, type=kind).body()
        return web.json_response(body, status=exc.status)
    except Exception as exc:  # noqa: BLE001 - a bug here must not take the server down
        logger.exception("unhandled error in %s %s", request.method, request.path)
        body = ApiError(f"internal error: {type(exc).__name__}: {exc}", status=500, type="server_error").body()
        return web.json_response(body, status=500)
