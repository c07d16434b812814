"""The OpenAI surface checks that apply to any server, asked through the official ``openai`` client.

``tests/test_openai_surface.py`` holds the harness server to them (and to its reference engine); here the same
questions go to real SGLang and vLLM servers, where a difference is a finding about that server, not a failure of
ours: each check returns what it saw (:class:`SurfaceResult`), and the test pins each server's answers in a table, so
a release that changes one is noticed either way.

The reference for an answer is the same server asked one prompt at a time, greedy, ``ignore_eos`` (tiny checkpoints
may end early), so the checks are about the surface, not the numerics; counts are held to the checkpoint's own
``tokenizer.json`` read by ``tokenizers``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Status = str  # "holds", "differs", or a named behaviour ("refused", "honoured")


@dataclass(frozen=True)
class SurfaceResult:
    check: str
    status: Status
    detail: str  # what was seen, in one line


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


PROMPTS = (
    "Question: Tom has 12 apples and eats 5 of them. How many apples are left?\nAnswer:",
    "Question: A train travels 60 miles in 1 hour. How far does it travel in 3 hours?\nAnswer:",
    "Question: What is 7 times 8?\nAnswer:",
)
NEW = 24


def _alone(s: Surface, max_tokens: int = NEW) -> list[str]:
    return [s.complete(p, max_tokens).choices[0].text for p in PROMPTS]


def multi_prompt_order(s: Surface) -> SurfaceResult:
    """One request with every prompt, in three orders: choices[i] carries index i and prompt i's own answer."""
    alone = _alone(s)
    bad = []
    for order in ((0, 1, 2), (2, 0, 1), (1, 2, 0)):
        got = s.complete([PROMPTS[i] for i in order], NEW).choices
        for pos, choice in enumerate(sorted(got, key=lambda c: c.index)):
            if choice.index != pos or choice.text != alone[order[pos]]:
                bad.append(f"order {order}: choice {choice.index} is not prompt {order[pos]}'s answer")
    return SurfaceResult("multi-prompt order", "differs" if bad else "holds", "; ".join(bad) or "3 orders x 3 prompts")


def usage_counts(s: Surface) -> SurfaceResult:
    """usage.prompt_tokens is the tokenizer's count (summed over a multi-prompt request), completion_tokens the
    generated tokens (max_tokens, finish "length"), total their sum."""
    one = s.complete(PROMPTS[0], NEW)
    many = s.complete(list(PROMPTS), NEW)
    want_one, want_many = s.count(PROMPTS[0]), sum(s.count(p) for p in PROMPTS)
    seen = (
        one.usage.prompt_tokens,
        one.usage.completion_tokens,
        many.usage.prompt_tokens,
        many.usage.completion_tokens,
    )
    want = (want_one, NEW, want_many, NEW * len(PROMPTS))
    totals = one.usage.total_tokens == seen[0] + seen[1] and many.usage.total_tokens == seen[2] + seen[3]
    status = "holds" if seen == want and totals else "differs"
    return SurfaceResult("usage counts", status, f"(prompt, completion) one/all: seen {seen}, tokenizer {want}")


def stop_across_tokens(s: Surface) -> SurfaceResult:
    """A stop string that spans two tokens of the answer cuts the text right before it, finish "stop"; an absent
    one leaves finish "length". Token boundaries from the checkpoint's tokenizer, not the server's offsets (those
    are checked by ``logprobs_order``)."""
    from tokenizers import Tokenizer

    text = s.complete(PROMPTS[1], NEW).choices[0].text
    tok = Tokenizer.from_file(str(s.ckpt / "tokenizer.json"))
    ids = tok.encode(text, add_special_tokens=False).ids
    bounds = [len(tok.decode(ids[:k])) for k in range(len(ids) + 1)]
    spans = [(bounds[k], bounds[k + 2]) for k in range(1, len(ids) - 1)]
    found = [(a, b) for a, b in spans if text[a:b].strip() and text.find(text[a:b]) == a]
    if not found or bounds[-1] != len(text):
        return SurfaceResult("stop across tokens", "differs", f"no two-token span to stop on in {text!r}")
    start, end = found[0]
    stop = text[start:end]
    cut = s.complete(PROMPTS[1], NEW, stop=[stop]).choices[0]
    absent = s.complete(PROMPTS[1], NEW, stop=["\x07never"]).choices[0]
    seen = (cut.text, cut.finish_reason, absent.finish_reason)
    want = (text[:start], "stop", "length")
    return SurfaceResult("stop across tokens", "holds" if seen == want else "differs", f"stop {stop!r}: seen {seen!r}")


def context_boundary(s: Surface) -> SurfaceResult:
    """prompt + max_tokens = the context /v1/models reports is accepted and generates max_tokens tokens (ignore_eos);
    one token more is a 400."""
    import openai

    models = s.client().models.list().data
    limit = next((getattr(m, "max_model_len", None) for m in models), None)
    if not isinstance(limit, int):
        return SurfaceResult("context boundary", "differs", "/v1/models reports no max_model_len")
    fits = limit - s.count(PROMPTS[2])
    seen = []
    for max_tokens in (fits, fits + 1):
        try:
            answer = s.complete(PROMPTS[2], max_tokens)
        except openai.BadRequestError as exc:
            seen.append(f"400: {str(exc)[:80]}")
            continue
        usage = answer.usage
        short = "" if usage.completion_tokens == max_tokens else f", not the {max_tokens} asked"
        seen.append(f"accepted ({usage.prompt_tokens} + {usage.completion_tokens} tokens{short})")
    whole = seen[0].startswith("accepted") and "not the" not in seen[0]
    status = "holds" if whole and seen[1].startswith("400") else "differs"
    return SurfaceResult("context boundary", status, f"max_model_len {limit}: at it {seen[0]}; one over {seen[1]}")


def _refused_or_honoured(name: str, ask: Callable[[], Any], honoured: Callable[[Any], bool]) -> SurfaceResult:
    import openai

    try:
        answer = ask()
    except openai.BadRequestError as exc:
        return SurfaceResult(name, "refused", str(exc)[:160])
    return SurfaceResult(name, "honoured" if honoured(answer) else "differs", json.dumps(answer.model_dump())[:160])


def echo(s: Surface) -> SurfaceResult:
    """echo=true: refused, or the prompt comes back before the answer."""
    alone = _alone(s, 8)[0]
    return _refused_or_honoured(
        "echo", lambda: s.complete(PROMPTS[0], 8, echo=True), lambda a: a.choices[0].text == PROMPTS[0] + alone
    )


def n_choices(s: Surface) -> SurfaceResult:
    """n=2 (greedy): refused, or two choices, each the one answer."""
    alone = _alone(s, 8)[0]
    return _refused_or_honoured(
        "n=2", lambda: s.complete(PROMPTS[0], 8, n=2), lambda a: [c.text for c in a.choices] == [alone, alone]
    )


def streaming(s: Surface) -> SurfaceResult:
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
    want_texts = {c.index: c.text for c in plain.choices}
    want_finish = {c.index: c.finish_reason for c in plain.choices}
    seen_usage = None if usage is None else (usage.prompt_tokens, usage.completion_tokens)
    want_usage = (plain.usage.prompt_tokens, plain.usage.completion_tokens)
    ok = texts == want_texts and finish == want_finish and seen_usage == want_usage
    detail = f"texts equal {texts == want_texts}, finish {finish == want_finish}, usage {seen_usage} vs {want_usage}"
    return SurfaceResult("streaming", "holds" if ok else "differs", detail)


def logprobs_order(s: Surface) -> SurfaceResult:
    """logprobs=5: each token's top 5 in decreasing order, (greedy) the chosen token's logprob the largest, and the
    token strings join to the text at their ``text_offset`` (each offset the previous plus the previous token's
    length)."""
    choice = s.complete(PROMPTS[0], 8, logprobs=5).choices[0]
    lp = choice.logprobs
    bad = []
    for k, (chosen, top) in enumerate(zip(lp.token_logprobs or [], lp.top_logprobs or [])):
        values = list((top or {}).values())
        if values != sorted(values, reverse=True):
            bad.append(f"token {k}: top_logprobs not in decreasing order")
        if values and abs(max(values) - chosen) > 1e-5:
            bad.append(f"token {k}: chosen {chosen:.5f} is not the top {max(values):.5f}")
        if len(values) != 5:
            bad.append(f"token {k}: {len(values)} top entries")
    tokens, offsets = list(lp.tokens or []), list(lp.text_offset or [])
    if "".join(tokens) != choice.text:
        bad.append(f"tokens {tokens!r} do not join to the text {choice.text!r}")
    steps = [b - a for a, b in zip(offsets, offsets[1:])]
    if steps != [len(t) for t in tokens[:-1]]:
        bad.append(f"text_offset {offsets} does not step by the tokens' lengths {[len(t) for t in tokens]}")
    return SurfaceResult("logprobs", "differs" if bad else "holds", "; ".join(bad[:3]) or "8 tokens x top 5")


CHECKS: tuple[Callable[[Surface], SurfaceResult], ...] = (
    multi_prompt_order,
    usage_counts,
    stop_across_tokens,
    context_boundary,
    echo,
    n_choices,
    streaming,
    logprobs_order,
)


def run_checks(s: Surface) -> dict[str, SurfaceResult]:
    """Every check; one that raises is a finding too (its exception, in one line)."""
    found = {}
    for check in CHECKS:
        try:
            result = check(s)
        except Exception as exc:  # noqa: BLE001 - a server's failure on a check is what the check reports
            result = SurfaceResult(check.__name__, "error", f"{type(exc).__name__}: {str(exc)[:160]}")
        found[result.check] = result
    return found
