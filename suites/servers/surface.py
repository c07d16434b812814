"""The OpenAI surface checks that apply to any server, asked through the official ``openai`` client.

``tests/test_openai_surface.py`` holds the harness server to them (and to its reference engine); here the same
questions go to real SGLang and vLLM servers, where a difference is a finding about that server, not a failure of
ours: each check returns what it saw (:class:`SurfaceResult`): a status word that sums it up and the details behind
it, named fields of numbers, booleans and short strings that the same server gives again on the same checkpoint
(never an id, a timestamp or generated text). ``suites/servers/surface_pins.py`` pins each server's details, so a
release that changes any of them is noticed, naming it.

The reference for an answer is the same server asked one prompt at a time, greedy, ``ignore_eos`` (tiny checkpoints
may end early), so the checks are about the surface, not the numerics; counts are held to the checkpoint's own
``tokenizer.json`` read by ``tokenizers``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixtures.tokenized import prompt_text

Status = str  # "holds", "differs", "error", or a named behaviour ("refused", "honoured")
# One detail: JSON's own types only, so that a detail read back from a pin file compares equal to one just seen.
Detail = str | int | bool | None | list[int] | list[str]
Details = dict[str, Detail]
MESSAGE_CHARS = 200  # a server's error message is kept to its first sentence, at most this long


Seen = tuple[Status, Details]  # what one check returns


@dataclass(frozen=True)
class SurfaceResult:
    """What one check saw: ``status`` sums it up, ``details`` are what a pin holds."""

    check: str
    status: Status
    details: Mapping[str, Detail]

    def line(self) -> str:
        return f"{self.check}: {self.status}: " + ", ".join(f"{k}={v}" for k, v in self.details.items())


@dataclass(frozen=True)
class Surface:
    """One running server under the checks: its URL, the model name it serves, the checkpoint it loaded, extra fields
    every request carries (``ignore_eos``)."""

    base_url: str
    served: str
    ckpt: Path
    extra: Mapping[str, Any]

    def client(self) -> Any:
        import openai

        return openai.OpenAI(base_url=self.base_url.rstrip("/") + "/v1", api_key="unused", max_retries=0, timeout=300)

    def complete(self, prompt: str | list[str], max_tokens: int, **fields: Any) -> Any:
        return self.client().completions.create(
            model=self.served,
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=0,
            extra_body=dict(self.extra),
            **fields,
        )

    def count(self, text: str) -> int:
        from tokenizers import Tokenizer

        return len(Tokenizer.from_file(str(self.ckpt / "tokenizer.json")).encode(text).ids)


# Words of the word-level test vocabulary (fixtures/tokenized.py), which every checkpoint's tokenizer encodes and
# decodes back unchanged: SGLang's row serves that random checkpoint, the others the shipped ones.
PROMPTS = (prompt_text(21, 14), prompt_text(22, 20), prompt_text(23, 9))
NEW = 24
TOP = 5


def _alone(s: Surface, max_tokens: int = NEW) -> list[str]:
    return [s.complete(p, max_tokens).choices[0].text for p in PROMPTS]


def _holds(ok: bool) -> Status:
    return "holds" if ok else "differs"


def _all_true(details: Details) -> bool:
    """Every yes/no detail is yes (the numbers are judged by each check itself)."""
    return all(v for v in details.values() if isinstance(v, bool))


def _first_sentence(text: str) -> str:
    """A message's first sentence (servers add counts, hints and sometimes request ids after it), trimmed."""
    head = text.strip().splitlines()[0] if text.strip() else ""
    return head.split(". ")[0].rstrip(".")[:MESSAGE_CHARS]


def _refusal(exc: Any) -> Details:
    """An HTTP error as details: its status code, the field it names and its message's first sentence."""
    body = exc.body if isinstance(exc.body, Mapping) else {}
    message = body.get("message") if isinstance(body.get("message"), str) else str(exc)
    return {"http_status": exc.status_code, "param": exc.param, "message": _first_sentence(message)}


def multi_prompt_order(s: Surface) -> Seen:
    """One request with every prompt, in three orders: choices[i] carries index i and prompt i's own answer."""
    alone = _alone(s)
    orders = ((0, 1, 2), (2, 0, 1), (1, 2, 0))
    misplaced: list[str] = []
    for order in orders:
        got = s.complete([PROMPTS[i] for i in order], NEW).choices
        for pos, choice in enumerate(sorted(got, key=lambda c: c.index)):
            if choice.index != pos or choice.text != alone[order[pos]]:
                misplaced.append(f"order {','.join(map(str, order))}: choice {choice.index}")
    details: Details = {"orders": len(orders), "prompts": len(PROMPTS), "misplaced": len(misplaced)}
    if misplaced:
        details["first_misplaced"] = misplaced[0]
    return _holds(not misplaced), details


def usage_counts(s: Surface) -> Seen:
    """usage.prompt_tokens is the tokenizer's count (summed over a multi-prompt request), completion_tokens the
    generated tokens (max_tokens each, ignore_eos), total their sum."""
    one = s.complete(PROMPTS[0], NEW).usage
    many = s.complete(list(PROMPTS), NEW).usage
    details: Details = {
        "max_tokens": NEW,
        "prompt_one": one.prompt_tokens,
        "prompt_one_tokenizer": s.count(PROMPTS[0]),
        "completion_one": one.completion_tokens,
        "prompt_all": many.prompt_tokens,
        "prompt_all_tokenizer": sum(s.count(p) for p in PROMPTS),
        "completion_all": many.completion_tokens,
        "totals_add_up": one.total_tokens == one.prompt_tokens + one.completion_tokens
        and many.total_tokens == many.prompt_tokens + many.completion_tokens,
    }
    ok = (
        (details["prompt_one"], details["completion_one"]) == (details["prompt_one_tokenizer"], NEW)
        and (details["prompt_all"], details["completion_all"]) == (details["prompt_all_tokenizer"], NEW * len(PROMPTS))
        and details["totals_add_up"] is True
    )
    return _holds(ok), details


def stop_across_tokens(s: Surface) -> Seen:
    """A stop string that spans two tokens of the answer cuts the text right before it, finish "stop"; an absent
    one leaves finish "length". Token boundaries from the checkpoint's tokenizer, not the server's offsets (those
    are checked by ``logprobs_order``)."""
    from tokenizers import Tokenizer

    text = s.complete(PROMPTS[1], NEW).choices[0].text
    offsets = Tokenizer.from_file(str(s.ckpt / "tokenizer.json")).encode(text, add_special_tokens=False).offsets
    spans = [(a, b) for (a, _), (_, b) in zip(offsets[1:], offsets[2:])]  # two tokens, after the first
    found = [(a, b) for a, b in spans if text[a:b].strip() and text.find(text[a:b]) == a]
    if not found:
        return "differs", {"two_token_span": False}
    start, end = found[0]
    cut = s.complete(PROMPTS[1], NEW, stop=[text[start:end]]).choices[0]
    absent = s.complete(PROMPTS[1], NEW, stop=["\x07never"]).choices[0]
    details: Details = {
        "two_token_span": True,
        "text_ends_before_stop": cut.text == text[:start],
        "finish": cut.finish_reason,
        "finish_without_stop": absent.finish_reason,
    }
    if cut.text != text[:start]:
        details |= {"text_chars": len(cut.text), "text_chars_before_stop": start}
    ok = details["text_ends_before_stop"] is True and (cut.finish_reason, absent.finish_reason) == ("stop", "length")
    return _holds(ok), details


def _attempt(prefix: str, ask: Callable[[], Any]) -> Details:
    """One completion as details under ``prefix``: accepted (tokens in and out, finish reason) or refused."""
    import openai

    try:
        choice_usage = ask()
    except openai.APIStatusError as exc:
        return {prefix: "refused", **{f"{prefix}_{k}": v for k, v in _refusal(exc).items()}}
    answer, usage = choice_usage.choices[0], choice_usage.usage
    return {
        prefix: "accepted",
        f"{prefix}_prompt_tokens": usage.prompt_tokens,
        f"{prefix}_generated": usage.completion_tokens,
        f"{prefix}_finish": answer.finish_reason,
    }


def context_boundary(s: Surface) -> Seen:
    """prompt + max_tokens = the context /v1/models reports is accepted and generates max_tokens tokens (ignore_eos);
    one token more is a 400."""
    models = s.client().models.list().data
    limit = next((getattr(m, "max_model_len", None) for m in models), None)
    if not isinstance(limit, int):
        return "differs", {"max_model_len": None}
    prompt = s.count(PROMPTS[2])
    fits = limit - prompt
    details: Details = {
        "max_model_len": limit,
        "prompt_tokens": prompt,
        "at_limit_asked": fits,
        **_attempt("at_limit", lambda: s.complete(PROMPTS[2], fits)),
        "one_over_asked": fits + 1,
        **_attempt("one_over", lambda: s.complete(PROMPTS[2], fits + 1)),
    }
    whole = details["at_limit"] == "accepted" and details["at_limit_generated"] == fits
    ok = whole and details["one_over"] == "refused" and details.get("one_over_http_status") == 400
    return _holds(ok), details


def _refused_or_honoured(ask: Callable[[], Any], judge: Callable[[Any], Details]) -> Seen:
    """Refused (a 400, with what it said) or honoured; honoured is "differs" when any of ``judge``'s booleans is
    false."""
    import openai

    try:
        answer = ask()
    except openai.BadRequestError as exc:
        return "refused", _refusal(exc)
    details = judge(answer)
    return "honoured" if _all_true(details) else "differs", details


def echo(s: Surface) -> Seen:
    """echo=true: refused, or the prompt comes back before the answer."""
    alone = _alone(s, 8)[0]
    return _refused_or_honoured(
        lambda: s.complete(PROMPTS[0], 8, echo=True),
        lambda a: {"prompt_then_answer": a.choices[0].text == PROMPTS[0] + alone},
    )


def n_choices(s: Surface) -> Seen:
    """n=2 (greedy): refused, or two choices, each the one answer."""
    alone = _alone(s, 8)[0]
    return _refused_or_honoured(
        lambda: s.complete(PROMPTS[0], 8, n=2),
        lambda a: {
            "choices": len(a.choices),
            "indexes": [c.index for c in a.choices],
            "each_the_answer": [c.text for c in a.choices] == [alone, alone],
        },
    )


def streaming(s: Surface) -> Seen:
    """stream=true joins to the same text, finish reason and usage as the same request not streamed, per choice."""
    plain = s.complete(list(PROMPTS), NEW)
    texts: dict[int, str] = {}
    finish: dict[int, str | None] = {}
    usage = None
    for chunk in s.complete(list(PROMPTS), NEW, stream=True, stream_options={"include_usage": True}):
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.text or "")
            finish[choice.index] = choice.finish_reason or finish.get(choice.index)
        usage = chunk.usage or usage
    want_usage = (plain.usage.prompt_tokens, plain.usage.completion_tokens)
    details: Details = {
        "choices": len(texts),
        "texts_equal": texts == {c.index: c.text for c in plain.choices},
        "finish_equal": finish == {c.index: c.finish_reason for c in plain.choices},
        "usage_chunk": usage is not None,
        "usage_equal": usage is not None and (usage.prompt_tokens, usage.completion_tokens) == want_usage,
    }
    return _holds(_all_true(details)), details


def logprobs_order(s: Surface) -> Seen:
    """logprobs=5: each token's top 5 in decreasing order, (greedy) the chosen token's logprob the largest, and the
    token strings join to the text at their ``text_offset`` (each offset the previous plus the previous token's
    length). Each property that fails names its first offending token and values."""
    choice = s.complete(PROMPTS[0], 8, logprobs=TOP).choices[0]
    lp = choice.logprobs
    tokens, offsets = list(lp.tokens or []), list(lp.text_offset or [])
    tops = [list((top or {}).values()) for top in lp.top_logprobs or []]
    unsorted = [k for k, v in enumerate(tops) if v != sorted(v, reverse=True)]
    not_top = [k for k, (c, v) in enumerate(zip(lp.token_logprobs or [], tops)) if v and abs(max(v) - c) > 1e-5]
    steps = [b - a for a, b in zip(offsets, offsets[1:])]
    details: Details = {
        "tokens": len(tokens),
        "top_sizes": sorted({len(v) for v in tops}),
        "top_decreasing": not unsorted,
        "chosen_is_top": not not_top,
        "tokens_join_to_text": "".join(tokens) == choice.text,
        "offsets_step_by_tokens": steps == [len(t) for t in tokens[:-1]],
    }
    if unsorted:
        details["first_unsorted"] = f"token {unsorted[0]}: {[round(x, 4) for x in tops[unsorted[0]]]}"
    if not_top:
        k = not_top[0]
        details["first_not_top"] = f"token {k}: chosen {lp.token_logprobs[k]:.4f}, top {max(tops[k]):.4f}"
    if not details["offsets_step_by_tokens"]:
        details |= {"text_offset_first": offsets[:4], "token_lengths_first": [len(t) for t in tokens[:4]]}
    return _holds(_all_true(details) and details["top_sizes"] == [TOP]), details


# Each check by the name its pins carry.
CHECKS: dict[str, Callable[[Surface], Seen]] = {
    "multi-prompt order": multi_prompt_order,
    "usage counts": usage_counts,
    "stop across tokens": stop_across_tokens,
    "context boundary": context_boundary,
    "echo": echo,
    "n=2": n_choices,
    "streaming": streaming,
    "logprobs": logprobs_order,
}


def run_checks(s: Surface) -> dict[str, SurfaceResult]:
    """Every check; one that raises is a finding too: status "error", its exception's type and first sentence."""
    found = {}
    for name, check in CHECKS.items():
        try:
            status, details = check(s)
        except Exception as exc:  # noqa: BLE001 - a server's failure on a check is what the check reports
            status, details = "error", {"exception": type(exc).__name__, "message": _first_sentence(str(exc))}
        found[name] = SurfaceResult(name, status, details)
    return found
