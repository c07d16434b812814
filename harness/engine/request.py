"""Requests, sampling parameters and results, with the validation that guards the engine's inputs."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

import torch


class RequestError(ValueError):
    """A request the engine refuses up front; the message names the field and the limit."""


# Caps on what one request may ask the engine to check at every step: a stop list is scanned
# against the decoded output each step, so an unbounded one slows every request in the batch.
MAX_STOP_STRINGS = 32
MAX_STOP_CHARS = 256
MAX_STOP_TOKEN_IDS = 256


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 64
    temperature: float = 0.0  # 0: greedy
    seed: int | None = None  # required for reproducible sampling when temperature > 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def validate(self) -> None:
        """0 new tokens is valid here: a request that only scores its prompt (the engine refuses it otherwise)."""
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 0:
            raise RequestError(f"max_new_tokens must be a non-negative integer, got {self.max_new_tokens!r}")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise RequestError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise RequestError(f"stop holds {len(self.stop)} strings; at most {MAX_STOP_STRINGS} are allowed")
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise RequestError(f"stop must hold non-empty strings, got {s!r:.80}")
            if len(s) > MAX_STOP_CHARS:
                raise RequestError(f"stop strings may have at most {MAX_STOP_CHARS} characters, got {len(s)}")
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise RequestError(
                f"stop_token_ids holds {len(self.stop_token_ids)} ids; at most {MAX_STOP_TOKEN_IDS} are allowed"
            )


class FinishReason(str, enum.Enum):
    LENGTH = "length"  # max_new_tokens reached
    STOP = "stop"  # EOS, a stop token id or a stop string
    ERROR = "error"  # this request failed alone (e.g. its sampling); ``error`` says why


@dataclass(frozen=True)
class PositionLogprobs:
    """One prompt position scored by the forward that prefilled it: the logprob of the token there given every
    token before it, and the ``top`` most likely tokens of the full softmax there, largest first."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token id, logprob)


@dataclass
class GenerateOutput:
    rid: int
    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    finish_reason: FinishReason
    matched_stop: str | int | None = None
    logits: torch.Tensor | None = None  # [len(output_ids), vocab] when requested
    error: str | None = None  # set with FinishReason.ERROR
    cached_tokens: int = 0  # prompt tokens served by the prefix cache (OpenAI's usage.prompt_tokens_details)
    # One entry per prompt token when asked (``prompt_logprobs``): None for the first (nothing comes before it)
    prompt_logprobs: tuple[PositionLogprobs | None, ...] | None = None


@dataclass(eq=False)
class Req:
    """A request's state inside the engine; two requests are the same only if they are one object."""

    rid: int
    prompt_ids: list[int]
    sampling: SamplingParams
    forced_output_ids: list[int] | None = None  # teacher forcing: feed these instead of sampling
    return_logits: bool = False
    # Score every prompt token, with this many top logprobs per position (None: not asked). Such a request neither
    # reads nor writes the prefix cache: a cached prefix would skip the forward whose logits score it.
    prompt_logprobs: int | None = None
    prompt_scores: list[PositionLogprobs] = field(default_factory=list)  # positions 1.. scored so far
    output_ids: list[int] = field(default_factory=list)
    req_pool_idx: int | None = None
    kv_len: int = 0  # tokens whose KV is in the pool
    slots_len: int = 0  # positions holding a full slot (kv_len, plus a step in flight)
    swa_evicted: int = 0  # positions < this have given back their SWA slot
    swa_branch: int = 0  # the tree held full KV up to here at admission, its window tombstoned (rule 7 of the tree)
    reserved_tokens: int = 0  # full slots reserved at admission (beyond its cached prefix)
    cached_tokens: int = 0  # prompt tokens the prefix cache served at admission (not prefilled)
    cache_protected_len: int = 0  # positions < this are the prefix cache's, lent by ``prefix_lock``
    prefix_lock: object | None = None  # the prefix cache's receipt for what it lends
    step_logits: list[torch.Tensor] = field(default_factory=list)
    generator: torch.Generator | None = None
    finish_reason: FinishReason | None = None
    matched_stop: str | int | None = None
    text: str = ""
    error: str | None = None  # set with FinishReason.ERROR

    @property
    def fill_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    def fill_slice(self, begin: int, end: int) -> list[int]:
        """``fill_ids[begin:end]`` without building the whole list (a decode step reads one token)."""
        p = len(self.prompt_ids)
        if end <= p:
            return self.prompt_ids[begin:end]
        if begin >= p:
            return self.output_ids[begin - p : end - p]
        return self.prompt_ids[begin:] + self.output_ids[: end - p]

    @property
    def uses_prefix_cache(self) -> bool:
        """False for a request that scores its prompt: every prompt position needs its own forward's logits."""
        return self.prompt_logprobs is None

    @property
    def max_total_tokens(self) -> int:
        """KV tokens the request can ever hold: the prompt plus every output token but the last."""
        return len(self.prompt_ids) + max(self.sampling.max_new_tokens - 1, 0)

    @property
    def prefill_done(self) -> bool:
        return self.kv_len >= len(self.prompt_ids)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None
