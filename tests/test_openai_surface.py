"""The harness server held to an independent client: the official ``openai`` package (and once lm-eval's own
``local-completions`` request path) against the server on a real port, each answer compared with what a
reference Engine on the same checkpoint computes, and token counts with the checkpoint's own tokenizer.

The server runs in process (one EngineWorker thread, the aiohttp app on a loop thread of its own, served as
``cli.serve`` serves it, with ``handler_cancellation``), so that the synchronous client can call it from the
test thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai  # the test extra's: a missing client fails here instead of skipping the file
import pytest
import torch
from aiohttp import web
from tokenizers import Tokenizer as HFTokenizer

from fixtures.scenarios.stops import cases, expected_stop
from fixtures.tokenized import CHAT_TEMPLATE, prompt_text, tokenized_checkpoint
from harness.engine import Engine, EngineConfig, GenerateOutput, SamplingParams
from harness.http_server.app import build_app
from harness.http_server.cli import ready_url
from harness.http_server.worker import EngineWorker
from tests.test_server import ENGINE_ARGS, MODEL
from tests.waits import SERVER_START_S, scaled

CONTEXT = 256  # the tiny checkpoint's context (the engine's max_context_len)

# -- the server and the reference ----------------------------------------------------------------


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tokenized_checkpoint(tmp_path_factory.mktemp("surface") / "ckpt")


@pytest.fixture(scope="module")
def ref(ckpt: Path) -> Engine:
    """Reference engine, same config as the served one, driven directly by the test thread."""
    return Engine(EngineConfig(model_path=ckpt, **ENGINE_ARGS))


@pytest.fixture(scope="module")
def hf(ckpt: Path) -> HFTokenizer:
    """The checkpoint's tokenizer.json read by the tokenizers library itself (not the harness's wrapper)."""
    return HFTokenizer.from_file(str(ckpt / "tokenizer.json"))


@dataclass(frozen=True)
class Served:
    url: str
    worker: EngineWorker


@contextmanager
def serving(worker: EngineWorker) -> Iterator[str]:
    """The app on 127.0.0.1 (an OS-picked port), its loop on a thread of its own; yields the base URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="surface-server-loop", daemon=True)
    thread.start()

    def call(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(scaled(60))

    async def make_runner() -> web.AppRunner:  # the app and its runner are made on the loop that serves them
        return web.AppRunner(build_app(worker, MODEL), handler_cancellation=True)

    runner = call(make_runner())
    call(runner.setup())
    try:
        call(web.TCPSite(runner, "127.0.0.1", 0).start())
        yield ready_url(runner.addresses[0])
    finally:
        call(runner.cleanup())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(scaled(30))
        loop.close()


@contextmanager
def served_engine(ckpt: Path, engine_args: dict[str, Any] = ENGINE_ARGS) -> Iterator[Served]:
    """An engine worker on ``ckpt`` with ``engine_args`` (the server tests' by default) and the app over it; both
    stopped on exit."""
    worker = EngineWorker(lambda: Engine(EngineConfig(model_path=ckpt, **engine_args))).start(
        timeout=scaled(SERVER_START_S)
    )
    try:
        with serving(worker) as url:
            yield Served(url, worker)
    finally:
        worker.stop()


@pytest.fixture(scope="module")
def served(ckpt: Path) -> Iterator[Served]:
    with served_engine(ckpt) as found:
        yield found


@pytest.fixture(scope="module")
def client(served: Served) -> Any:
    """No retries: a retried 5xx or dropped connection would hide exactly what these tests look for."""
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0, timeout=scaled(120)) as c:
        yield c


def greedy(ref: Engine, prompt: str | list[int], max_tokens: int, stop: tuple[str, ...] = ()) -> GenerateOutput:
    return ref.generate([prompt], SamplingParams(max_new_tokens=max_tokens, stop=stop))[0]


def finish_order(ref: Engine, prompts: list[str], params: SamplingParams) -> list[int]:
    """The prompt indexes in the order the reference engine finishes them, all admitted at once as the server
    admits one request's prompts (same engine configuration, so the served engine finishes them alike)."""
    reqs = [ref.add_request(p, params) for p in prompts]
    index = {r.rid: i for i, r in enumerate(reqs)}
    order: list[int] = []
    while ref.has_work():
        order += [index[o.rid] for o in ref.step().finished]
    return order


def refused(call: Any) -> Any:
    """The client's error for a call the server must refuse with 400."""
    with pytest.raises(openai.BadRequestError) as err:
        call()
    assert err.value.status_code == 400, err.value
    return err.value


def spanning_stop(text: str, n_words: int, first_word: int) -> tuple[str, int]:
    """A stop string over ``n_words`` words (tokens) of ``text``, from inside its first word to inside its last,
    whose first occurrence in ``text`` is where it was taken from (at ``first_word`` or the next word that
    qualifies); with that offset."""
    words = text.split(" ")
    for k in range(first_word, len(words) - n_words + 1):
        at = len(" ".join(words[:k])) + (1 if k else 0)
        span = " ".join(words[k : k + n_words])
        head, tail = int(len(words[k]) > 1), int(len(words[k + n_words - 1]) > 1)
        stop = span[head : len(span) - tail]
        if text.find(stop) == at + head:
            return stop, at + head
    raise AssertionError(f"no stop string of {n_words} words from word {first_word} in {text!r}")


# -- completions: choices, indexes, n, echo ---------------------------------------------------------

SHORT, MID, LONG = prompt_text(6, 2), prompt_text(4, 40), prompt_text(5, 180)  # 3, 41 and 181 tokens


def stops_for_finish_order(ref: Engine, prompts: list[str], max_tokens: int) -> tuple[str, ...]:
    """Stop strings (two tokens each) that end prompt 0 after a few tokens, prompt 1 later and leave prompt 2 to run
    to ``max_tokens``: prompts of one request then finish in that order whatever their places in the list."""
    full = [greedy(ref, p, max_tokens).text for p in prompts]
    stops = []
    for which, start in ((0, 2), (1, 10)):
        words = full[which].split(" ")
        for k in range(start, len(words) - 1):
            stop = f"{words[k]} {words[k + 1]}"
            first_here = full[which].find(stop) == len(" ".join(words[:k])) + 1
            if first_here and all(stop not in full[j] for j in range(len(full)) if j != which):
                stops.append(stop)
                break
    assert len(stops) == 2, (full, stops)
    return tuple(stops)


@pytest.mark.parametrize(
    "order, max_tokens",
    [((2, 1, 0), 24), ((0, 2, 1), 32), ((1, 0, 2), 20)],
    ids=["first-finisher-last", "first-finisher-first", "first-finisher-middle"],
)
def test_multi_prompt_choices_keep_their_index_whatever_finishes_first(
    client: Any, ref: Engine, order: tuple[int, int, int], max_tokens: int
) -> None:
    """Prompts of 181, 41 and 3 tokens in one request, with stop strings that end them at different steps: each
    ``choices[i]`` is prompt i's answer, with ``index == i``, whichever prompt the engine finished first."""
    base = [SHORT, MID, LONG]
    stops = stops_for_finish_order(ref, base, max_tokens)
    prompts = [base[k] for k in order]
    params = SamplingParams(max_new_tokens=max_tokens, stop=stops)
    finished = finish_order(ref, prompts, params)
    assert finished[0] == order.index(0) and finished != sorted(finished), finished  # the order is adversarial
    want = ref.generate(prompts, params)
    assert [w.finish_reason.value for w in want].count("stop") == 2, want

    got = client.completions.create(model=MODEL, prompt=prompts, max_tokens=max_tokens, temperature=0, stop=list(stops))
    assert [c.index for c in got.choices] == [0, 1, 2]
    assert [(c.text, c.finish_reason) for c in got.choices] == [(w.text, w.finish_reason.value) for w in want]


def test_n_above_one_is_refused_naming_n_and_n_one_answers(client: Any, ref: Engine) -> None:
    prompt = prompt_text(3)
    err = refused(lambda: client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, n=2))
    assert err.param == "n" and "n must be 1" in err.message, err
    err = refused(
        lambda: client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "the water"}], max_tokens=4, n=3
        )
    )
    assert err.param == "n", err
    got = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, n=1, temperature=0)
    assert [c.text for c in got.choices] == [greedy(ref, prompt, 8).text]


def test_echo_true_puts_the_prompt_before_the_answer_and_false_does_not(client: Any, ref: Engine) -> None:
    """The prompt's logprobs under echo are tests/test_server_echo.py's."""
    prompt = prompt_text(7, 9)
    want = greedy(ref, prompt, 6)
    got = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, echo=True, temperature=0)
    assert got.choices[0].text == prompt + want.text and got.usage.completion_tokens == len(want.output_ids)
    err = refused(lambda: client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, echo=True, stream=True))
    assert err.param == "echo" and "stream" in err.message, err
    got = client.completions.create(model=MODEL, prompt=prompt, max_tokens=6, echo=False, temperature=0)
    assert got.choices[0].text == want.text and not got.choices[0].text.startswith(prompt)


# -- logprobs ------------------------------------------------------------------------------------


def test_logprobs_are_the_reference_softmax_and_agree_with_the_tokenizer(
    client: Any, ref: Engine, hf: HFTokenizer
) -> None:
    """``logprobs=5``: each chosen token's logprob is the reference's log-softmax, the top 5 are sorted by
    decreasing logprob and hold the chosen token whenever it is among them (greedy: it is the first), the token
    strings are the tokenizer's for the chosen ids, and ``text_offset`` places each token in the text."""
    prompt, n = prompt_text(3), 8
    req = ref.add_request(prompt, SamplingParams(max_new_tokens=n), return_logits=True)
    want = next(o for o in ref.run_until_done() if o.rid == req.rid)
    assert want.finish_reason.value == "length" and len(want.output_ids) == n
    logp = torch.log_softmax(want.logits.double(), -1)

    got = client.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0, logprobs=5)
    [choice] = got.choices
    lp = choice.logprobs
    assert choice.text == want.text
    assert [hf.token_to_id(t) for t in lp.tokens] == want.output_ids  # each string is its token's
    assert hf.decode([hf.token_to_id(t) for t in lp.tokens]) == choice.text  # and the tokens make the text
    assert len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    for step, (token, chosen, top) in enumerate(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs)):
        assert chosen == pytest.approx(logp[step, want.output_ids[step]].item(), abs=1e-5), step
        values = list(top.values())
        assert len(top) == 5 and values == sorted(values, reverse=True), (step, top)
        assert values == pytest.approx(logp[step].topk(5).values.tolist(), abs=1e-5), step
        assert next(iter(top)) == token and top[token] == pytest.approx(chosen, abs=1e-9), (step, top)  # greedy
    offsets = lp.text_offset + [len(choice.text)]
    assert offsets[0] == 0 and offsets == sorted(offsets), offsets
    pieces = [choice.text[a:b] for a, b in zip(offsets, offsets[1:])]
    assert [p.strip() for p in pieces] == lp.tokens, pieces  # each token's text, with the space that joins it


# -- stop strings and max_tokens -----------------------------------------------------------------


def test_stop_strings_spanning_tokens_cut_the_text_where_the_reference_shows_them(client: Any, ref: Engine) -> None:
    """Stop strings over two and three tokens, beginning and ending inside one: the text ends just before the
    first occurrence, streamed or not (a stream must hold back the text that may begin one, for a token or two)."""
    prompt, n = prompt_text(8), 24
    full = greedy(ref, prompt, n)
    assert full.finish_reason.value == "length"
    for n_words, first_word in ((2, 3), (3, 6)):
        stop, cut = spanning_stop(full.text, n_words, first_word)
        assert " " in stop, stop  # it spans tokens (a word-level tokenizer: a space separates two)
        want = greedy(ref, prompt, n, (stop,))
        assert want.text == full.text[:cut] and want.finish_reason.value == "stop", (stop, want)
        got = client.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0, stop=[stop, "zz zz"])
        assert (got.choices[0].text, got.choices[0].finish_reason) == (full.text[:cut], "stop"), stop
        assert got.usage.completion_tokens == len(want.output_ids)  # the tokens up to the one that completed it
        pieces, finish, _, _ = streamed_completion(client, prompt=prompt, max_tokens=n, temperature=0, stop=stop)
        assert ("".join(pieces[0]), finish[0]) == (full.text[:cut], "stop"), (stop, pieces)
    absent = "water water water"
    assert absent not in full.text
    got = client.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0, stop=absent)
    assert (got.choices[0].text, got.choices[0].finish_reason) == (full.text, "length")


def test_every_named_stop_case_streamed_and_not(client: Any, ref: Engine) -> None:
    """The stop-string cases of fixtures.scenarios.stops (inside a token, across 2 and 4, the first token, only the
    last completing it, overlapping, nested, unicode that never matches) through the client, streamed and not,
    against the independent matcher: same text, finish reason and token count."""
    prompt, n = prompt_text(3, n_words=10), 24
    out = ref.generate([prompt], SamplingParams(max_new_tokens=n, ignore_eos=True))[0]
    ends = [len(ref.tokenizer.decode(out.output_ids[:k])) for k in range(1, n + 1)]
    for case in cases(out.text, ends):
        want = expected_stop(out.text, ends, case.stops)
        finish = "stop" if want.stop else "length"
        kwargs = dict(
            prompt=prompt, max_tokens=n, temperature=0, stop=list(case.stops), extra_body={"ignore_eos": True}
        )
        got = client.completions.create(model=MODEL, **kwargs)
        assert (got.choices[0].text, got.choices[0].finish_reason) == (want.text, finish), case.name
        assert got.usage.completion_tokens == want.tokens, case.name
        pieces, finishes, usage, _ = streamed_completion(client, stream_options={"include_usage": True}, **kwargs)
        assert ("".join(pieces[0]), finishes[0], usage.completion_tokens) == (want.text, finish, want.tokens), (
            case.name,
            pieces,
        )


def test_max_tokens_is_exact_and_the_context_boundary_is_prompt_plus_max_tokens(
    client: Any, ref: Engine, hf: HFTokenizer
) -> None:
    """``max_tokens`` tokens exactly, finishing by length; prompt + max_tokens may fill the context (the
    ``max_model_len`` that /v1/models reports) and one more token is a 400 naming max_tokens, for completions and
    chat, streamed or not; a prompt that fills the context alone is a 400 naming the prompt."""
    prompt = prompt_text(1, 3)
    n_prompt = len(hf.encode(prompt).ids)
    assert client.models.list().data[0].model_extra["max_model_len"] == CONTEXT
    for max_tokens in (5, CONTEXT - n_prompt):
        want = greedy(ref, prompt, max_tokens)
        assert want.finish_reason.value == "length", (max_tokens, want.finish_reason)
        got = client.completions.create(model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0)
        assert got.usage.completion_tokens == max_tokens and got.choices[0].finish_reason == "length"
        assert got.usage.prompt_tokens + got.usage.completion_tokens <= CONTEXT
        assert got.choices[0].text == want.text
    over = CONTEXT - n_prompt + 1
    for stream in (False, True):
        err = refused(lambda: client.completions.create(model=MODEL, prompt=prompt, max_tokens=over, stream=stream))
        assert err.param == "max_tokens" and f"max_tokens ({over})" in err.message, err
        assert f"at most {CONTEXT - n_prompt} new tokens fit" in err.message, err
    err = refused(lambda: client.completions.create(model=MODEL, prompt=[prompt, prompt_text(2, 200)], max_tokens=60))
    assert err.param == "max_tokens" and "prompt[1]: prompt (201 tokens)" in err.message, err
    long_ids = [2] + [hf.token_to_id("the")] * (CONTEXT - 1)
    err = refused(lambda: client.completions.create(model=MODEL, prompt=long_ids, max_tokens=1))
    assert err.param == "prompt" and "leaves no room" in err.message, err
    assert client.completions.create(model=MODEL, prompt=long_ids[:-1], max_tokens=1).usage.total_tokens == CONTEXT
    messages = [{"role": "user", "content": "how is the water"}]
    n_chat = len(chat_ids(hf, messages))
    for field in ("max_tokens", "max_completion_tokens"):
        err = refused(
            lambda: client.chat.completions.create(model=MODEL, messages=messages, **{field: CONTEXT - n_chat + 1})
        )
        assert err.param == field and f"at most {CONTEXT - n_chat} new tokens fit" in err.message, err
    got = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=CONTEXT - n_chat, temperature=0)
    assert got.usage.total_tokens <= CONTEXT and got.usage.prompt_tokens == n_chat


# -- usage ---------------------------------------------------------------------------------------


def test_usage_counts_the_tokenizers_prompt_tokens_and_the_generated_ones(
    client: Any, ref: Engine, hf: HFTokenizer
) -> None:
    prompts = [prompt_text(12, 5), prompt_text(13, 60), prompt_text(14, 1)]
    counts = [len(hf.encode(p).ids) for p in prompts]
    assert len(set(counts)) == 3, counts
    stop = (greedy(ref, prompts[0], 16).text.split(" ")[5],)  # one prompt stops early: counts differ per choice
    want = ref.generate(prompts, SamplingParams(max_new_tokens=16, stop=stop))
    generated = [len(w.output_ids) for w in want]
    assert len(set(generated)) > 1, generated
    got = client.completions.create(model=MODEL, prompt=prompts, max_tokens=16, temperature=0, stop=list(stop))
    assert got.usage.prompt_tokens == sum(counts)
    assert got.usage.completion_tokens == sum(generated)
    assert got.usage.total_tokens == sum(counts) + sum(generated)
    for p, count, n in zip(prompts, counts, generated):  # and one at a time
        one = client.completions.create(model=MODEL, prompt=p, max_tokens=16, temperature=0, stop=list(stop))
        assert (one.usage.prompt_tokens, one.usage.completion_tokens, one.usage.total_tokens) == (count, n, count + n)


# -- chat ----------------------------------------------------------------------------------------


def chat_ids(hf: HFTokenizer, messages: list[dict[str, str]]) -> list[int]:
    """The prompt as transformers renders the checkpoint's chat template, tokenized without added specials."""
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_object=hf, bos_token="<bos>", eos_token="<eos>")
    text = tok.apply_chat_template(messages, chat_template=CHAT_TEMPLATE, add_generation_prompt=True, tokenize=False)
    return hf.encode(text, add_special_tokens=False).ids


def test_chat_answers_what_the_reference_generates_on_the_rendered_template(
    client: Any, ref: Engine, hf: HFTokenizer
) -> None:
    messages = [
        {"role": "user", "content": "how is the water"},
        {"role": "assistant", "content": "good"},
        {"role": "user", "content": "and the day"},
    ]
    ids = chat_ids(hf, messages)
    assert ids[0] == 2 and ids.count(2) == 1  # the template's BOS, once
    want = greedy(ref, ids, 12)
    got = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=12, temperature=0)
    [choice] = got.choices
    assert (choice.index, choice.message.role, choice.message.content) == (0, "assistant", want.text)
    assert choice.finish_reason == want.finish_reason.value
    assert (got.usage.prompt_tokens, got.usage.completion_tokens) == (len(ids), len(want.output_ids))


# -- streaming -----------------------------------------------------------------------------------


def streamed_completion(client: Any, **kwargs: Any) -> tuple[dict[int, list[str]], dict[int, str], Any, list[Any]]:
    """Per choice its text pieces and finish reason, the usage chunk's usage, and every chunk."""
    chunks = list(client.completions.create(model=MODEL, stream=True, **kwargs))
    pieces: dict[int, list[str]] = {}
    finish: dict[int, str] = {}
    usage = None
    for chunk in chunks:
        if not chunk.choices:  # the usage chunk
            assert usage is None and chunk.usage is not None
            usage = chunk.usage
            continue
        [c] = chunk.choices
        assert c.index not in finish, f"choice {c.index} went on after its finish_reason"
        pieces.setdefault(c.index, []).append(c.text)
        if c.finish_reason is not None:
            finish[c.index] = c.finish_reason
    return pieces, finish, usage, chunks


def test_streamed_completion_joins_to_the_non_streamed_answer(client: Any, ref: Engine) -> None:
    """One choice, per step: several chunks, joined the same text, finish reason and usage as without stream
    (and as the reference); ``usage`` is null on every chunk but the last, which has no choices."""
    prompt = prompt_text(9, 7)
    plain = client.completions.create(model=MODEL, prompt=prompt, max_tokens=20, temperature=0)
    assert plain.choices[0].text == greedy(ref, prompt, 20).text
    pieces, finish, usage, chunks = streamed_completion(
        client, prompt=prompt, max_tokens=20, temperature=0, stream_options={"include_usage": True}
    )
    assert "".join(pieces[0]) == plain.choices[0].text and finish == {0: plain.choices[0].finish_reason}
    assert sum(bool(p) for p in pieces[0]) > 5, pieces  # the text came as it was made, not at the end
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (
        plain.usage.prompt_tokens,
        plain.usage.completion_tokens,
        plain.usage.total_tokens,
    )
    assert all(c.usage is None for c in chunks[:-1]) and chunks[-1].usage is not None and not chunks[-1].choices
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("cmpl-")
    assert all(c.object == "text_completion" and c.model == MODEL for c in chunks)
    # without stream_options: no usage chunk
    pieces, finish, usage, _ = streamed_completion(client, prompt=prompt, max_tokens=20, temperature=0)
    assert usage is None and "".join(pieces[0]) == plain.choices[0].text


def test_streamed_multi_prompt_with_stop_strings_spanning_tokens(client: Any, ref: Engine) -> None:
    """Three prompts that finish at different steps, cut by stop strings of two tokens: each choice's chunks join
    to its non-streamed text (nothing of a stop string leaks out before the engine cuts it), in its own index."""
    base, max_tokens = [SHORT, MID, LONG], 24
    stops = stops_for_finish_order(ref, base, max_tokens)
    prompts = [base[k] for k in (2, 1, 0)]
    kwargs = dict(prompt=prompts, max_tokens=max_tokens, temperature=0, stop=list(stops))
    plain = client.completions.create(model=MODEL, **kwargs)
    pieces, finish, usage, _ = streamed_completion(client, stream_options={"include_usage": True}, **kwargs)
    assert sorted(pieces) == [0, 1, 2]
    assert {i: "".join(p) for i, p in pieces.items()} == {c.index: c.text for c in plain.choices}
    assert finish == {c.index: c.finish_reason for c in plain.choices}
    assert sorted(finish.values()) == ["length", "stop", "stop"]
    assert (usage.prompt_tokens, usage.completion_tokens) == (plain.usage.prompt_tokens, plain.usage.completion_tokens)


def test_streamed_chat_joins_to_the_non_streamed_answer(client: Any, ref: Engine, hf: HFTokenizer) -> None:
    messages = [{"role": "user", "content": "what is the day"}]
    plain = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, temperature=0)
    assert plain.choices[0].message.content == greedy(ref, chat_ids(hf, messages), 16).text
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    *content, usage_chunk = chunks
    assert content[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.choices[0].index == 0 for c in content)
    assert "".join(c.choices[0].delta.content or "" for c in content) == plain.choices[0].message.content
    assert [c.choices[0].finish_reason for c in content] == [None] * (len(content) - 1) + [
        plain.choices[0].finish_reason
    ]
    assert not usage_chunk.choices and usage_chunk.usage.completion_tokens == plain.usage.completion_tokens
    assert usage_chunk.usage.prompt_tokens == plain.usage.prompt_tokens


def test_stream_fields_are_validated(client: Any) -> None:
    prompt = prompt_text(2)
    err = refused(lambda: client.completions.create(model=MODEL, prompt=prompt, stream_options={"include_usage": True}))
    assert err.param == "stream_options" and "stream=true" in err.message, err
    err = refused(lambda: client.completions.create(model=MODEL, prompt=prompt, stream=True, logprobs=2))
    assert err.param == "logprobs", err
    err = refused(
        lambda: client.completions.create(
            model=MODEL, prompt=prompt, stream=True, stream_options={"include_usage": True, "continuous": True}
        )
    )
    assert err.param == "stream_options" and "continuous" in err.message, err
    err = refused(lambda: client.completions.create(model=MODEL, prompt=prompt, extra_body={"stream": "yes"}))
    assert err.param == "stream", err
    # what only the engine can refuse (at admission, on the engine thread) is a 400 too: no 200 went out before it
    err = refused(lambda: client.completions.create(model=MODEL, prompt=[2, 4, 500], max_tokens=4, stream=True))
    assert err.param == "prompt" and "outside [0, 128)" in err.message, err


def test_a_client_that_leaves_mid_stream_harms_no_other_request(
    client: Any, served: Served, ref: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream dropped after its first chunks is cancelled in the engine (its slots come back at once) while a
    request beside it answers exactly as the reference does. Each forward takes 20 ms more here, so that the
    dropped stream (240 tokens) cannot have finished by the time its client leaves."""
    worker = served.worker
    engine = worker.engine
    real_forward = engine.runner.forward

    def slow_forward(batch: Any) -> Any:
        time.sleep(0.02)
        return real_forward(batch)

    monkeypatch.setattr(engine.runner, "forward", slow_forward)
    before = worker.stats()
    other_prompt, other = prompt_text(15, 30), {}
    want = greedy(ref, other_prompt, 40)

    def other_request() -> None:
        other["out"] = client.completions.create(model=MODEL, prompt=other_prompt, max_tokens=40, temperature=0)

    beside = threading.Thread(target=other_request)
    stream = client.completions.create(model=MODEL, prompt=prompt_text(16), max_tokens=240, stream=True)
    for n, chunk in enumerate(stream, 1):
        assert chunk.choices[0].finish_reason is None
        if n == 1:
            beside.start()
        if n == 3:
            break
    deadline = time.monotonic() + scaled(30)
    while worker.stats().running < 2 and beside.is_alive() and time.monotonic() < deadline:
        time.sleep(0.002)  # both in the engine when the client leaves
    stream.close()
    beside.join(scaled(120))
    assert other["out"].choices[0].text == want.text
    while worker.stats().running and time.monotonic() < deadline:
        time.sleep(0.01)
    after = worker.stats()
    assert after.requests_cancelled == before.requests_cancelled + 1, after
    assert after.requests_served == before.requests_served + 1, after  # the dropped one never finished
    assert after.generated_tokens - before.generated_tokens == len(want.output_ids), after
    assert after.running == 0 and after.engine_failures == before.engine_failures
    assert worker.pools().idle, worker.pools()


def test_an_engine_failure_mid_stream_ends_it_with_an_error_event_and_no_done(
    client: Any, served: Served, ref: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the 200 has gone out, a failed forward is one ``data: {"error": ...}`` event and the stream ends
    without ``[DONE]`` (the client raises; what came before is the beginning of the right text); the server then
    serves the next request as before."""
    import json
    import urllib.request

    engine = served.worker.engine
    real_forward, calls = engine.runner.forward, {"n": 0}

    def failing_forward(batch: Any) -> Any:  # the prefill, four decodes, then a failure
        calls["n"] += 1
        if calls["n"] % 6 == 0:
            raise RuntimeError("injected forward failure")
        return real_forward(batch)

    monkeypatch.setattr(engine.runner, "forward", failing_forward)
    prompt = prompt_text(17)
    want = greedy(ref, prompt, 30).text
    payload = {"model": MODEL, "prompt": prompt, "max_tokens": 30, "temperature": 0, "stream": True}
    post = urllib.request.Request(
        f"{served.url}/v1/completions", json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(post, timeout=scaled(60)) as raw:
        assert raw.status == 200 and raw.headers["Content-Type"].startswith("text/event-stream")
        body = raw.read().decode()
    events = [e for e in body.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events) and "[DONE]" not in body, events
    error = json.loads(events[-1].removeprefix("data: "))["error"]
    assert error["type"] == "server_error" and "injected forward failure" in error["message"], error
    assert len(events) > 1, events  # text went out before the failure

    got: list[str] = []
    with pytest.raises(openai.APIError, match="injected forward failure") as err:
        for chunk in client.completions.create(model=MODEL, prompt=prompt, max_tokens=30, temperature=0, stream=True):
            got.append(chunk.choices[0].text)
    assert not isinstance(err.value, openai.APIStatusError), err.value  # an event in a 200 stream, not a status
    assert got and want.startswith("".join(got)) and len("".join(got)) < len(want), (got, want)
    monkeypatch.undo()
    again = client.completions.create(model=MODEL, prompt=prompt, max_tokens=30, temperature=0)
    assert again.choices[0].text == want


# -- lm-eval's own request path ------------------------------------------------------------------


def test_lm_eval_local_completions_batches_through_the_server(
    served: Served, ref: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lm-eval 0.4.13's ``local-completions`` with ``batch_size=3``: one request with a list of prompts, whose
    choices it places by ``index``; its answers are the reference's."""
    pytest.importorskip("tenacity", reason="lm-eval's local-completions needs tenacity (pip install 'lm-eval[api]')")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    prompts = [LONG, SHORT, MID]
    stops = stops_for_finish_order(ref, [SHORT, MID, LONG], 24)
    until = [*stops, "\n\n"]
    gen_kwargs = {"until": until, "do_sample": False, "temperature": 0.0, "max_gen_toks": 24}
    lm = LocalCompletionsAPI(
        base_url=f"{served.url}/v1/completions",
        model=MODEL,
        tokenizer_backend=None,
        tokenized_requests=False,
        max_length=CONTEXT,
        batch_size=3,
        max_retries=1,
    )
    requests = [
        Instance(request_type="generate_until", doc={}, arguments=(p, dict(gen_kwargs)), idx=i)
        for i, p in enumerate(prompts)
    ]
    got = lm.generate_until(requests, disable_tqdm=True)
    want = ref.generate(prompts, SamplingParams(max_new_tokens=24, stop=tuple(until)))
    assert got == [w.text for w in want]
    assert sorted(w.finish_reason.value for w in want) == ["length", "stop", "stop"]


# -- the streamed text's rule, on decoders the fixture's word-level tokenizer does not have ------------------


class _Bytes:
    """A byte-level decoder: each id is one byte of UTF-8; an incomplete character decodes as U+FFFD."""

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


class _Ligatures(_Bytes):
    """A decoder that rewrites the end of the text when a token follows: ``->`` becomes ``→``."""

    def decode(self, ids: list[int]) -> str:
        return super().decode(ids).replace("->", "\u2192")


@pytest.mark.parametrize("decoder", [_Bytes(), _Ligatures()], ids=["utf8-bytes", "ligatures"])
@pytest.mark.parametrize("stop", [(), ("é b",), ("-> x", "\U0001f600!")])
def test_streamed_text_never_takes_back_what_it_sent(decoder: _Bytes, stop: tuple[str, ...]) -> None:
    """One token at a time, as the engine finishes (its text cut before the first stop string it finds): the sent
    pieces always begin the final text and join to it. Multi-byte characters arrive a byte at a time, and ``->``
    turns into one character when ``>`` follows; stop strings begin inside a token."""
    from harness.http_server.stream import TextStream

    text = "a é b -> x \U0001f600! é b c"
    ids = list(text.encode())
    for cut_at in range(1, len(ids) + 1):  # every point where the engine may finish
        stream, sent = TextStream(decoder, stop), ""
        final = None
        for k in range(cut_at):
            so_far = decoder.decode(ids[: k + 1])
            found = [so_far.find(s) for s in stop if s in so_far]
            if found or k == cut_at - 1:  # the engine finishes: stop string (cut) or length
                final = so_far[: min(found)] if found else so_far
                sent += stream.finish(final)
                break
            sent += stream.advance(ids[k : k + 1])
        assert sent == final, (cut_at, sent, final)
