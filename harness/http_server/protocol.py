"""OpenAI request parsing: JSON bodies -> small dataclasses, or an ApiError that names the field.

Policy, so that an eval never runs with settings the engine silently ignores:
* unknown fields are refused (400, naming them);
* OpenAI/lm-eval fields the engine does not implement are accepted only at values that do not
  change the result (``n: 1``, chat's ``logprobs: false``, penalties
  at their neutral value, ``top_p``/``top_k``/``min_p`` either disabled or with greedy decoding,
  where they cannot matter), and refused otherwise;
* ``logprobs`` on /v1/completions is implemented (0 to ``MAX_LOGPROBS``: each generated token's logprob and the
  top-k of the full softmax, as vLLM and SGLang return them);
* ``echo: true`` on /v1/completions is implemented as OpenAI's legacy completions return it: the text is the prompt
  and then the completion, and with ``logprobs`` every prompt token is scored too (the first one's logprob null),
  which is how lm-eval asks for loglikelihoods; with echo ``max_tokens`` may be 0 (score the prompt, generate
  nothing). ``echo`` with ``stream: true`` is refused (400 naming ``echo``);
* ``stream: true`` is implemented on both endpoints (Server-Sent Events, see stream.py), with
  ``stream_options: {"include_usage": bool}``; the joined chunks are the text a non-streamed request
  gets. ``stream_options`` without ``stream: true`` and ``logprobs`` with it are refused (400);
* the context holds the prompt and the completion together (OpenAI's and vLLM's ``max_model_len``):
  prompt tokens + ``max_tokens`` above it is a 400 naming ``max_tokens`` (the default counts too), or
  the prompt when it alone leaves no room. Checked after tokenization (app.py), so one token tighter
  than the engine, whose last sampled token never needs a KV slot;
* nothing is truncated: a prompt that does not fit is refused (400), never cut;
* sizes are capped before any work is done on them: a prompt longer than ``max_prompt_chars``
  characters cannot fit in the context and is refused with 413 naming the limit, as are more than
  ``max_prompts`` prompts in one request; the stop list is capped in count and length (400);
* error messages quote client values shortened (``short_repr``), never whole.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.engine import SamplingParams
from harness.engine.request import MAX_STOP_CHARS, MAX_STOP_STRINGS, MAX_STOP_TOKEN_IDS

Prompt = str | list[int]

MAX_LOGPROBS = 20  # top logprobs per token on /v1/completions (vLLM's default cap)
DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
MAX_PROMPTS = 1024  # prompts in one /v1/completions request


class ApiError(Exception):
    """An error response in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        type: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.type = type
        self.code = code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class Limits:
    """What the served engine allows; validation messages quote these numbers."""

    max_context_len: int
    vocab_size: int
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    max_prompt_chars: int | None = None  # None: no character cap (only the engine's token limit)
    max_prompts: int = MAX_PROMPTS

    @classmethod
    def for_tokenizer(cls, max_context_len: int, vocab_size: int, longest_token_chars: int) -> Limits:
        """The character cap a prompt must stay under to have any chance of fitting the context: every
        token covers at most ``longest_token_chars`` characters (doubled: normalizers may shrink text)."""
        return cls(max_context_len, vocab_size, max_prompt_chars=2 * max_context_len * max(1, longest_token_chars))


@dataclass(frozen=True)
class GenerationFields:
    """The generation settings shared by /v1/completions and /v1/chat/completions."""

    max_tokens: int
    temperature: float
    seed: int | None
    stop: tuple[str, ...]
    stop_token_ids: tuple[int, ...]
    ignore_eos: bool

    max_tokens_param: str = "max_tokens"  # the field a client set it by (chat: or max_completion_tokens)
    max_tokens_sent: bool = True  # False: the default; an error that names it says so

    def sampling(self) -> SamplingParams:
        return SamplingParams(
            max_new_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=self.seed,
            stop=self.stop,
            stop_token_ids=self.stop_token_ids,
            ignore_eos=self.ignore_eos,
        )


@dataclass(frozen=True)
class StreamOptions:
    """``stream: true``: the answer as Server-Sent Events; ``include_usage`` adds a last chunk holding the usage
    (and ``"usage": null`` on every other chunk), as OpenAI's ``stream_options`` does."""

    include_usage: bool = False


@dataclass(frozen=True)
class CompletionRequest:
    prompts: list[Prompt]  # one choice per prompt, in this order
    model: str | None
    gen: GenerationFields
    logprobs: int | None = None  # top logprobs per generated token; None: no logprobs
    by_token_id: bool = False  # vLLM's return_tokens_as_token_ids: logprob keys are "token_id:N", not text
    stream: StreamOptions | None = None  # None: one JSON response
    echo: bool = False  # the prompt comes back before the completion (and, with logprobs, its tokens' logprobs)


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[ChatMessage, ...]
    model: str | None
    gen: GenerationFields
    stream: StreamOptions | None = None  # None: one JSON response


# Fields both endpoints accept (some only at neutral values, see _check_neutral_fields).
_COMMON = frozenset(
    {
        "model",
        "max_tokens",
        "temperature",
        "seed",
        "stop",
        "n",
        "stream",
        "stream_options",
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "logit_bias",
        "user",
        "do_sample",
        # extensions shared with SGLang/vLLM, implemented by the engine:
        "stop_token_ids",
        "ignore_eos",
    }
)
COMPLETION_FIELDS = _COMMON | {"prompt", "echo", "logprobs", "best_of", "suffix", "return_tokens_as_token_ids"}
CHAT_FIELDS = _COMMON | {"messages", "max_completion_tokens", "logprobs", "top_logprobs"}
CHAT_ROLES = ("system", "user", "assistant")

_MISSING = object()


# -- entry points --------------------------------------------------------------------------------


def parse_completion(body: Any, limits: Limits) -> CompletionRequest:
    body = _object(body)
    _refuse_unknown(body, COMPLETION_FIELDS)
    if "prompt" not in body:
        raise ApiError("missing required field 'prompt'", param="prompt")
    prompts = _prompts(body["prompt"], limits)
    echo = body.get("echo")
    if echo is not None and not isinstance(echo, bool):
        raise ApiError(f"echo must be a boolean, got {_json_type(echo)} {short_repr(echo)}", param="echo")
    echo = bool(echo)
    _neutral(body, "best_of", _is_int, lambda v: v == 1, "best_of must be 1")
    _neutral(body, "suffix", _is_str, lambda v: v == "", "suffix (insertion) is not supported")
    logprobs = body.get("logprobs")
    if isinstance(logprobs, bool) and not logprobs:
        logprobs = None  # false: none, as null
    elif logprobs is not None:
        logprobs = _int_field(body, "logprobs", 0, MAX_LOGPROBS)
    by_id = body.get("return_tokens_as_token_ids", False)
    if not isinstance(by_id, bool):
        raise ApiError(
            f"return_tokens_as_token_ids must be a boolean, got {short_repr(by_id)}", param="return_tokens_as_token_ids"
        )
    # with echo, 0 new tokens is a request too: the prompt's own logprobs (lm-eval's loglikelihood asks for them)
    max_tokens = _int_field(body, "max_tokens", 0 if echo else 1, limits.max_context_len)
    gen = _generation(body, limits, max_tokens=max_tokens)
    stream = _stream(body)
    if stream is not None and echo:
        raise ApiError("echo=true is not supported with stream=true; send one or the other", param="echo")
    if stream is not None and logprobs is not None:
        raise ApiError("logprobs are not supported with stream=true; send one or the other", param="logprobs")
    return CompletionRequest(
        prompts, model=_model(body), gen=gen, logprobs=logprobs, by_token_id=by_id, stream=stream, echo=echo
    )


def parse_chat(body: Any, limits: Limits) -> ChatRequest:
    body = _object(body)
    _refuse_unknown(body, CHAT_FIELDS)
    if "messages" not in body:
        raise ApiError("missing required field 'messages'", param="messages")
    messages = _messages(body["messages"])
    chars = sum(len(m.content) for m in messages)
    if limits.max_prompt_chars is not None and chars > limits.max_prompt_chars:
        raise ApiError(
            f"messages hold {chars} characters; this server accepts at most {limits.max_prompt_chars} "
            f"(its context holds {limits.max_context_len} tokens)",
            param="messages",
            status=413,
        )
    _neutral(body, "logprobs", _is_bool, lambda v: v is False, "logprobs are not implemented by this server")
    _neutral(body, "top_logprobs", _is_int, lambda v: v == 0, "top_logprobs are not implemented by this server")
    max_tokens = _int_field(body, "max_tokens", 1, limits.max_context_len)
    max_completion = _int_field(body, "max_completion_tokens", 1, limits.max_context_len)
    if max_tokens is not None and max_completion is not None and max_tokens != max_completion:
        raise ApiError(
            f"max_tokens ({max_tokens}) and max_completion_tokens ({max_completion}) disagree",
            param="max_completion_tokens",
        )
    param = "max_completion_tokens" if max_completion is not None else "max_tokens"
    gen = _generation(
        body, limits, max_tokens=max_completion if max_completion is not None else max_tokens, max_tokens_param=param
    )
    return ChatRequest(messages, model=_model(body), gen=gen, stream=_stream(body))


# -- shared fields -------------------------------------------------------------------------------


def _generation(
    body: dict[str, Any], limits: Limits, *, max_tokens: int | None, max_tokens_param: str = "max_tokens"
) -> GenerationFields:
    temperature = _number_field(body, "temperature")
    temperature = 0.0 if temperature is None else float(temperature)
    if temperature < 0:
        raise ApiError(f"temperature must be >= 0, got {temperature}", param="temperature")
    greedy = temperature == 0
    seed = _int_field(body, "seed", 0, 2**64 - 1)
    stop = _stop(body.get("stop"))
    stop_token_ids = _token_ids_field(body, "stop_token_ids", limits.vocab_size)
    ignore_eos = body.get("ignore_eos", False)
    if ignore_eos is None:
        ignore_eos = False
    if not isinstance(ignore_eos, bool):
        raise ApiError(f"ignore_eos must be a boolean, got {short_repr(ignore_eos)}", param="ignore_eos")
    _check_neutral_fields(body, greedy)
    return GenerationFields(
        max_tokens=limits.default_max_tokens if max_tokens is None else max_tokens,
        temperature=temperature,
        seed=seed,
        stop=stop,
        stop_token_ids=stop_token_ids,
        ignore_eos=ignore_eos,
        max_tokens_param=max_tokens_param,
        max_tokens_sent=max_tokens is not None,
    )


def _stream(body: dict[str, Any]) -> StreamOptions | None:
    """``stream`` and ``stream_options``: None for one JSON response."""
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(f"stream must be a boolean, got {_json_type(stream)} {short_repr(stream)}", param="stream")
    options = body.get("stream_options")
    if options is None:
        return StreamOptions() if stream else None
    if not stream:
        raise ApiError("stream_options is only allowed with stream=true", param="stream_options")
    if not isinstance(options, dict):
        raise ApiError(f"stream_options must be an object, got {_json_type(options)}", param="stream_options")
    unknown = sorted(set(options) - {"include_usage"})
    if unknown:
        raise ApiError(
            f"stream_options has unsupported field(s): {', '.join(map(short_repr, unknown))}; only include_usage",
            param="stream_options",
        )
    include_usage = options.get("include_usage", False)
    if include_usage is None:
        include_usage = False
    if not isinstance(include_usage, bool):
        raise ApiError(
            f"stream_options.include_usage must be a boolean, got {short_repr(include_usage)}", param="stream_options"
        )
    return StreamOptions(include_usage)


def _check_neutral_fields(body: dict[str, Any], greedy: bool) -> None:
    """Fields accepted only where they cannot change the output."""
    _neutral(body, "n", _is_int, lambda v: v == 1, "n must be 1: this server returns one choice per prompt")
    _neutral(body, "frequency_penalty", _is_number, lambda v: v == 0, "frequency_penalty is not implemented; send 0")
    _neutral(body, "presence_penalty", _is_number, lambda v: v == 0, "presence_penalty is not implemented; send 0")
    _neutral(body, "repetition_penalty", _is_number, lambda v: v == 1, "repetition_penalty is not implemented; send 1")
    _neutral(body, "logit_bias", lambda v: isinstance(v, dict), lambda v: not v, "logit_bias is not implemented")
    _neutral(
        body,
        "top_p",
        _is_number,
        lambda v: 0 < v <= 1 and (v == 1 or greedy),
        "top_p < 1 is only accepted with temperature 0 (nucleus sampling is not implemented); top_p must be in (0, 1]",
    )
    _neutral(
        body,
        "top_k",
        _is_int,
        lambda v: v in (0, -1) or (v > 0 and greedy),
        "top_k sampling is not implemented: send top_k 0 or -1, or temperature 0",
    )
    _neutral(
        body,
        "min_p",
        _is_number,
        lambda v: 0 <= v <= 1 and (v == 0 or greedy),
        "min_p sampling is not implemented: send min_p 0, or temperature 0",
    )
    _neutral(body, "user", _is_str, lambda v: True, "")
    do_sample = body.get("do_sample")
    if do_sample is not None:
        if not isinstance(do_sample, bool):
            raise ApiError(f"do_sample must be a boolean, got {short_repr(do_sample)}", param="do_sample")
        if do_sample == greedy:
            raise ApiError(
                f"do_sample={str(do_sample).lower()} contradicts temperature {'0' if greedy else '> 0'}",
                param="do_sample",
            )


def _model(body: dict[str, Any]) -> str | None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(f"model must be a string, got {short_repr(model)}", param="model")
    return model


def _prompts(value: Any, limits: Limits) -> list[Prompt]:
    what = "prompt must be a string, a list of strings, a list of token ids or a list of token-id lists"
    if isinstance(value, str):
        prompts: list[Prompt] = [value]
    elif not isinstance(value, list):
        raise ApiError(f"{what}; got {_json_type(value)}", param="prompt")
    elif not value:
        raise ApiError("prompt must not be an empty list", param="prompt")
    elif _is_int(value[0]):  # one prompt of token ids: its length is checked before its items
        prompts = [_token_list(value, limits, "prompt")]
    elif len(value) > limits.max_prompts:
        raise ApiError(
            f"prompt holds {len(value)} prompts; this server accepts at most {limits.max_prompts} per request",
            param="prompt",
            status=413,
        )
    elif all(isinstance(p, str) for p in value):
        prompts = list(value)
    elif all(isinstance(p, list) and p and _is_int(p[0]) for p in value):
        prompts = [_token_list(p, limits, f"prompt[{i}]") for i, p in enumerate(value)]
    else:
        raise ApiError(f"{what}; got a list holding {sorted({_json_type(p) for p in value})}", param="prompt")
    cap = limits.max_prompt_chars
    for i, p in enumerate(prompts):
        if cap is not None and isinstance(p, str) and len(p) > cap:
            where = f"prompt[{i}]" if len(prompts) > 1 else "prompt"
            raise ApiError(
                f"{where} has {len(p)} characters; this server accepts at most {cap} characters per "
                f"prompt (its context holds {limits.max_context_len} tokens)",
                param="prompt",
                status=413,
            )
    return prompts


def _token_list(value: list, limits: Limits, where: str) -> list[int]:
    """A prompt of token ids: no longer than the context (checked first: a huge list is refused unread)."""
    what = "prompt must be a string, a list of strings, a list of token ids or a list of token-id lists"
    if len(value) > limits.max_context_len:
        raise ApiError(
            f"{where} has {len(value)} token ids; the context holds at most {limits.max_context_len}",
            param="prompt",
            status=413,
        )
    if not all(_is_int(t) for t in value):
        raise ApiError(f"{what}; {where} mixes token ids with other values", param="prompt")
    return list(value)


def _messages(value: Any) -> tuple[ChatMessage, ...]:
    if not isinstance(value, list) or not value:
        raise ApiError("messages must be a non-empty list of {role, content} objects", param="messages")
    out = []
    for i, msg in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            raise ApiError(f"{where} must be an object, got {_json_type(msg)}", param="messages")
        unknown = sorted(set(msg) - {"role", "content", "name"})
        if unknown:
            raise ApiError(f"{where} has unsupported field(s): {', '.join(unknown)}", param="messages")
        role = msg.get("role")
        if role not in CHAT_ROLES:
            raise ApiError(f"{where}.role must be one of {list(CHAT_ROLES)}, got {short_repr(role)}", param="messages")
        if "name" in msg and not isinstance(msg["name"], str):
            raise ApiError(f"{where}.name must be a string", param="messages")
        out.append(ChatMessage(role, _content(msg.get("content", _MISSING), where)))
    return tuple(out)


def _content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: only text ones
        texts = []
        for part in content:
            if not (
                isinstance(part, dict)
                and part.get("type") == "text"
                and isinstance(part.get("text"), str)
                and set(part) <= {"type", "text"}
            ):
                raise ApiError(
                    f"{where}.content: only {{'type': 'text', 'text': ...}} parts are supported", param="messages"
                )
            texts.append(part["text"])
        return "".join(texts)
    raise ApiError(
        f"{where}.content must be a string or a list of text parts, got {_json_type(content)}", param="messages"
    )


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if isinstance(stops, list) and len(stops) > MAX_STOP_STRINGS:
        raise ApiError(f"stop holds {len(stops)} strings; at most {MAX_STOP_STRINGS} are allowed", param="stop")
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise ApiError(f"stop must be a string or a list of strings, got {short_repr(value)}", param="stop")
    if any(s == "" for s in stops):
        raise ApiError("stop strings must not be empty", param="stop")
    longest = max(len(s) for s in stops) if stops else 0
    if longest > MAX_STOP_CHARS:
        raise ApiError(f"stop strings may have at most {MAX_STOP_CHARS} characters, got one of {longest}", param="stop")
    return tuple(stops)


# -- type helpers --------------------------------------------------------------------------------


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(f"the request body must be a JSON object, got {_json_type(body)}")
    return body


def _refuse_unknown(body: dict[str, Any], known: frozenset[str]) -> None:
    unknown = sorted(set(body) - known)
    if unknown:
        raise ApiError(
            f"unknown field(s): {', '.join(unknown)}; this server accepts {', '.join(sorted(known))}", param=unknown[0]
        )


def _neutral(
    body: dict[str, Any], key: str, type_ok: Callable[[Any], bool], value_ok: Callable[[Any], bool], why: str
) -> None:
    """``key`` may be absent, null, or a well-typed value that ``value_ok`` accepts."""
    value = body.get(key)
    if value is None:
        return
    if not type_ok(value):
        raise ApiError(f"{key} has the wrong type: {_json_type(value)} {short_repr(value)}", param=key)
    if not value_ok(value):
        raise ApiError(f"{key}={short_repr(value)} is not supported: {why}", param=key)


def _int_field(body: dict[str, Any], key: str, lo: int, hi: int) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not _is_int(value):
        raise ApiError(f"{key} must be an integer, got {_json_type(value)} {short_repr(value)}", param=key)
    if not lo <= value <= hi:
        raise ApiError(f"{key} must be in [{lo}, {hi}], got {value}", param=key)
    return value


def _number_field(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if not _is_number(value):
        raise ApiError(f"{key} must be a number, got {_json_type(value)} {short_repr(value)}", param=key)
    return float(value)


def _token_ids_field(body: dict[str, Any], key: str, vocab: int) -> tuple[int, ...]:
    value = body.get(key)
    if value is None:
        return ()
    if isinstance(value, list) and len(value) > MAX_STOP_TOKEN_IDS:
        raise ApiError(f"{key} holds {len(value)} ids; at most {MAX_STOP_TOKEN_IDS} are allowed", param=key)
    if not isinstance(value, list) or not all(_is_int(t) and 0 <= t < vocab for t in value):
        raise ApiError(f"{key} must be a list of token ids in [0, {vocab}), got {short_repr(value)}", param=key)
    return tuple(value)


_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict = 2, 4, 4
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = 40


def short_repr(value: Any) -> str:
    """A client value quoted in an error: bounded in length and depth, whatever was sent."""
    return _REPR.repr(value)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_bool(v: Any) -> bool:
    return isinstance(v, bool)


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__
