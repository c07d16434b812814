"""``echo: true`` on the harness server's /v1/completions, as lm-eval's loglikelihood path asks for it: every prompt
token's logprob as the engine's own prefill scores it, held to transformers on a shipped checkpoint (fp32, within
``TOL``), through the official ``openai`` client and through lm-eval's ``local-completions`` on a multiple-choice task
(``suites/accuracy/choice_style.yaml``); the prefix cache neither read nor changed by an echo request, and the
requests beside one unharmed; bad input refused naming its field.

The server runs in process on a real port (``tests.test_openai_surface.serving``), tape graphs captured at start-up,
chunks of 16 tokens (the checkpoint's window is 16 too), so a prompt is scored over several chunks and windows, on the
graph path where a chunk's rows fit the extend graphs and eagerly where they do not."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import openai
import pytest

from fixtures.data.jsonl import read_jsonl
from harness.engine import Engine, EngineConfig, SamplingParams
from harness.paths import REPO
from harness.http_server.worker import EngineWorker
from suites.servers.loglikelihood import Oracle, check_lm_eval_loglikelihoods
from tests.test_openai_surface import Served, refused, served_engine, serving
from tests.test_server import MODEL
from tests.waits import SERVER_START_S, scaled

CKPT = REPO / "fixtures" / "models" / "gemma2-tiny-swa"
CONTEXT = 512
ENGINE_ARGS: dict[str, Any] = dict(
    graphs="tape",
    # at start-up, as the server captures by default: a lazy capture on the engine thread would refuse the handlers'
    # Tensor.tolist() while it runs (harness/graph/tape.py: the process-wide patch), which a logprobs answer uses
    capture="startup",
    max_running_requests=8,
    chunk_size=16,
    max_prefill_tokens=64,
    num_threads=1,
    max_context_len=CONTEXT,
    swa_pool_size=4096,  # roomy: no request here evicts the tree's SWA KV, so the tree's counts are exact
)
TOL = 1e-3  # fp32 logprobs vs transformers (measured: at most 3e-5 on this checkpoint)
TOP = 2

_SHOTS = read_jsonl(REPO / "fixtures" / "data" / "gsm_style" / "fewshot.jsonl")
SHORT = "Question: What is 2 + 3?\nAnswer:"
MID = f"Question: {_SHOTS[0]['question']}\nAnswer: {_SHOTS[0]['answer']}"
LONG = "\n\n".join(f"Question: {d['question']}\nAnswer: {d['answer']}" for d in _SHOTS[1:4])


# -- the server and the oracle -------------------------------------------------------------------


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    with served_engine(CKPT, ENGINE_ARGS) as found:
        yield found


@pytest.fixture(scope="module")
def client(served: Served) -> Iterator[Any]:
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0, timeout=scaled(120)) as c:
        yield c


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    return Oracle(CKPT)


def worst_diff(got: list[float | None], want: list[float]) -> float:
    """The largest |got - want| over a prompt's tokens (``got``'s first entry is the null of the first token)."""
    assert got[0] is None and len(got) == len(want) + 1, (got[:3], len(got), len(want))
    return max(abs(g - w) for g, w in zip(got[1:], want))


def health(served: Served) -> dict[str, Any]:
    with urllib.request.urlopen(f"{served.url}/health", timeout=scaled(30)) as resp:
        return json.load(resp)


def post(served: Served, payload: Any) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{served.url}/v1/completions", json.dumps(payload).encode(), {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=scaled(120)) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as err:
        return err.code, json.load(err)


# -- the prompt's logprobs -----------------------------------------------------------------------


def test_echo_scores_every_prompt_token_as_transformers_does(client: Any, oracle: Oracle) -> None:
    """Three prompts in one request (14, 99 and 269 tokens: one chunk, seven, seventeen), ``max_tokens: 0``: each
    choice's text is its prompt, its tokens are the prompt's, the first logprob (and top) is null and every other is
    transformers' within TOL; the top logprobs are sorted, none below the chosen token's, which equals its own entry
    when it is among them (lm-eval's is_greedy compares the two exactly)."""
    prompts = [SHORT, MID, LONG]
    got = client.completions.create(model=MODEL, prompt=prompts, max_tokens=0, echo=True, logprobs=TOP, temperature=0)
    ids = [oracle.ids(p) for p in prompts]
    assert [len(i) for i in ids] == [14, 99, 269]
    assert got.usage.prompt_tokens == sum(map(len, ids)) and got.usage.completion_tokens == 0
    worst = 0.0
    for choice, prompt, prompt_ids in zip(got.choices, prompts, ids):
        lp = choice.logprobs
        assert choice.text == prompt and choice.finish_reason == "length"
        names = [
            oracle.tokenizer.convert_tokens_to_string([t]) for t in oracle.tokenizer.convert_ids_to_tokens(prompt_ids)
        ]
        assert lp.tokens == names
        assert len(lp.text_offset) == len(prompt_ids) and lp.text_offset == sorted(lp.text_offset)
        assert lp.top_logprobs[0] is None and all(len(top) == TOP for top in lp.top_logprobs[1:])
        for name, chosen, top in zip(names[1:], lp.token_logprobs[1:], lp.top_logprobs[1:]):
            values = list(top.values())
            assert values == sorted(values, reverse=True) and chosen <= values[0]
            assert top.get(name, chosen) == chosen
        worst = max(worst, worst_diff(lp.token_logprobs, oracle.token_logprobs(prompt_ids)))
    assert worst <= TOL, f"prompt logprobs differ from transformers' by up to {worst:.3g}"


def test_echo_with_new_tokens_is_the_prompt_then_the_same_completion(client: Any, oracle: Oracle) -> None:
    """``max_tokens: 3`` (lm-eval sends 1): the text is the prompt and then the completion a plain request gets; the
    logprobs are the prompt's, then the completion's own (the same tokens, logprobs and offsets past the prompt)."""
    plain = client.completions.create(model=MODEL, prompt=MID, max_tokens=3, logprobs=TOP, temperature=0).choices[0]
    echoed = client.completions.create(
        model=MODEL, prompt=MID, max_tokens=3, logprobs=TOP, temperature=0, echo=True
    ).choices[0]
    n = len(oracle.ids(MID))
    assert echoed.text == MID + plain.text and echoed.finish_reason == plain.finish_reason
    lp, want = echoed.logprobs, plain.logprobs
    assert lp.tokens[n:] == want.tokens and len(lp.tokens) == n + 3
    assert lp.token_logprobs[n:] == pytest.approx(want.token_logprobs, abs=1e-5)
    assert [list(t) for t in lp.top_logprobs[n:]] == [list(t) for t in want.top_logprobs]
    assert lp.text_offset[n:] == [len(MID) + o for o in want.text_offset]
    assert worst_diff(lp.token_logprobs[:n], oracle.token_logprobs(oracle.ids(MID))) <= TOL


def test_token_id_prompts_are_scored_and_echoed_decoded(client: Any, oracle: Oracle) -> None:
    """As lm-eval sends them: a list of token-id lists (and one list of ids), without BOS; the echoed text is their
    decoding, the tokens' logprobs transformers' for exactly those ids."""
    batch = [oracle.tokenizer(t, add_special_tokens=False).input_ids for t in (SHORT, MID)]
    got = client.completions.create(model=MODEL, prompt=batch, max_tokens=1, echo=True, logprobs=1, temperature=0)
    one = client.completions.create(model=MODEL, prompt=batch[1], max_tokens=0, echo=True, logprobs=1, temperature=0)
    for choice, ids in [*zip(got.choices, batch), (one.choices[0], batch[1])]:
        generated = len(choice.logprobs.tokens) - len(ids)
        assert choice.text.startswith(oracle.tokenizer.decode(ids)) and generated in (0, 1)
        assert worst_diff(choice.logprobs.token_logprobs[: len(ids)], oracle.token_logprobs(ids)) <= TOL


def test_echo_without_logprobs_echoes_the_prompt(client: Any) -> None:
    plain = client.completions.create(model=MODEL, prompt=SHORT, max_tokens=4, temperature=0).choices[0]
    echoed = client.completions.create(model=MODEL, prompt=SHORT, max_tokens=4, temperature=0, echo=True).choices[0]
    assert echoed.text == SHORT + plain.text and echoed.logprobs is None
    nothing = client.completions.create(model=MODEL, prompt=SHORT, max_tokens=0, temperature=0, echo=True)
    assert nothing.choices[0].text == SHORT and nothing.usage.completion_tokens == 0


# -- the prefix cache and the requests beside an echo request ------------------------------------


def test_echo_neither_reads_nor_changes_the_prefix_cache(served: Served, client: Any, oracle: Oracle) -> None:
    """A prompt the cache holds whole: an echo request of it (and of a longer one sharing it) reads nothing from the
    cache (``cached_tokens`` 0) yet scores every token, and leaves the tree as it was; the plain request hits again."""
    first = client.completions.create(model=MODEL, prompt=LONG, max_tokens=4, temperature=0)
    again = client.completions.create(model=MODEL, prompt=LONG, max_tokens=4, temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens > 0 and again.choices[0].text == first.choices[0].text
    before = health(served)["pools"]["prefix_cache"]

    longer = LONG + "\n\n" + SHORT
    for prompt in (LONG, longer):
        got = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1, echo=True, logprobs=1, temperature=0)
        assert got.usage.prompt_tokens_details.cached_tokens == 0
        ids = oracle.ids(prompt)
        assert worst_diff(got.choices[0].logprobs.token_logprobs[: len(ids)], oracle.token_logprobs(ids)) <= TOL

    after = health(served)
    tree = ("tokens", "swa_tokens", "cached_tokens", "evicted_tokens", "swa_evicted_tokens", "swa_tombstoned_tokens")
    assert {k: after["pools"]["prefix_cache"][k] for k in tree} == {k: before[k] for k in tree}
    assert after["pools"]["idle"], after["pools"]
    third = client.completions.create(model=MODEL, prompt=LONG, max_tokens=4, temperature=0)
    assert third.choices[0].text == first.choices[0].text
    assert third.usage.prompt_tokens_details.cached_tokens == again.usage.prompt_tokens_details.cached_tokens


def test_echo_requests_beside_plain_ones_change_no_answer(oracle: Oracle) -> None:
    """Echo and plain requests sharing prefixes, all at once on a server of their own (which proves they ran
    together): each plain answer is the one it gets alone, each echo request's logprobs are transformers'."""
    plain_prompts = [LONG, MID, LONG + "\n\n" + MID, SHORT]
    echo_prompts = [LONG, MID + "\n\n" + SHORT, LONG + "\n\n" + MID]
    worker = EngineWorker(lambda: Engine(EngineConfig(model_path=CKPT, **ENGINE_ARGS))).start(
        timeout=scaled(SERVER_START_S)
    )
    try:
        with serving(worker) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as client:

            def plain(prompt: str) -> str:
                return (
                    client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0).choices[0].text
                )

            def echo(prompt: str) -> list[float | None]:
                got = client.completions.create(
                    model=MODEL, prompt=prompt, max_tokens=1, echo=True, logprobs=1, temperature=0
                )
                return got.choices[0].logprobs.token_logprobs

            alone = [plain(p) for p in plain_prompts]
            assert worker.stats().max_batch_size == 1
            with ThreadPoolExecutor(len(plain_prompts) + len(echo_prompts)) as pool:
                echoes = [pool.submit(echo, p) for p in echo_prompts]
                plains = [pool.submit(plain, p) for p in plain_prompts]
                texts, scored = [f.result() for f in plains], [f.result() for f in echoes]
            stats, pools = worker.stats(), worker.pools()
    finally:
        worker.stop()
    assert texts == alone
    for prompt, logprobs in zip(echo_prompts, scored):
        ids = oracle.ids(prompt)
        assert worst_diff(logprobs[: len(ids)], oracle.token_logprobs(ids)) <= TOL
    assert stats.max_batch_size >= 2 and stats.requests_failed == 0, stats  # they ran together
    assert pools is not None and pools.idle, pools


# -- lm-eval's loglikelihood path ----------------------------------------------------------------


def test_lm_eval_multiple_choice_scores_are_transformers(served: Served, oracle: Oracle, monkeypatch: Any) -> None:
    """lm-eval 0.4.13's ``local-completions`` on ``swa_choice_style`` (suites/servers/loglikelihood.py): every
    loglikelihood it records is transformers' sum over the choice's tokens, its is_greedy transformers' argmax, and its
    accuracy the one transformers' loglikelihoods give."""
    report = check_lm_eval_loglikelihoods(
        served.url, MODEL, CKPT, TOL, monkeypatch, server="the harness server", oracle=oracle, context=CONTEXT
    )
    assert 0 < report.accuracy < 1, report  # the task is neither trivial nor hopeless for the checkpoint


# -- bad input -----------------------------------------------------------------------------------

BAD_ECHO = [
    # (payload, param, words the message must contain)
    ({"prompt": SHORT, "echo": True, "stream": True}, "echo", "echo=true is not supported with stream=true"),
    ({"prompt": SHORT, "echo": True, "logprobs": 1, "stream": True}, "echo", "stream=true"),
    ({"prompt": SHORT, "echo": True, "n": 2}, "n", "n must be 1"),
    ({"prompt": SHORT, "echo": True, "best_of": 2}, "best_of", "best_of"),
    ({"prompt": SHORT, "echo": "yes"}, "echo", "echo must be a boolean"),
    ({"prompt": SHORT, "echo": 1}, "echo", "echo must be a boolean"),
    ({"prompt": SHORT, "echo": True, "max_tokens": -1}, "max_tokens", f"max_tokens must be in [0, {CONTEXT}], got -1"),
    ({"prompt": SHORT, "max_tokens": -1}, "max_tokens", f"max_tokens must be in [1, {CONTEXT}], got -1"),
    ({"prompt": SHORT, "max_tokens": 0}, "max_tokens", f"max_tokens must be in [1, {CONTEXT}], got 0"),
    ({"prompt": SHORT, "echo": True, "logprobs": 21}, "logprobs", "logprobs must be in [0, 20]"),
    ({"prompt": SHORT, "echo": True, "suffix": "x"}, "suffix", "suffix"),
    ({"prompt": [[1, 5, 99999]], "echo": True, "max_tokens": 0, "logprobs": 1}, "prompt", "outside [0, 919)"),
    ({"prompt": "x " * 1000, "echo": True, "max_tokens": 0}, "prompt", "the prompt does not fit"),
    ({"prompt": [SHORT, "x " * 1000], "echo": True, "max_tokens": 0}, "prompt", "prompt[1]"),
]


@pytest.mark.parametrize("payload, param, words", BAD_ECHO, ids=[f"{p}-{i}" for i, (_, p, _) in enumerate(BAD_ECHO)])
def test_bad_echo_requests_get_400_naming_the_field(served: Served, payload: dict, param: str, words: str) -> None:
    status, body = post(served, payload)
    assert status == 400, (payload, body)
    err = body["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param, (payload, err)
    assert words in err["message"], (payload, err["message"])


def test_echo_with_stream_is_refused_by_the_openai_client_too(client: Any) -> None:
    err = refused(lambda: client.completions.create(model=MODEL, prompt=SHORT, echo=True, stream=True, max_tokens=2))
    assert err.param == "echo", err


# -- the engine alone ----------------------------------------------------------------------------


@pytest.mark.parametrize("page_size", [1, 4])
def test_engine_scores_prompts_beside_cached_requests_and_leaves_the_tree_alone(oracle: Oracle, page_size: int) -> None:
    """The engine's ``prompt_logprobs``, no server: scoring requests (``max_new_tokens`` 0 and 2) admitted with plain
    ones that hit the tree, in one batch, at page sizes 1 and 4: each scored prompt is transformers', each plain
    answer the one it gets alone, the tree holds what the plain requests left and nothing of the scoring ones, and
    every slot comes back."""
    engine = Engine(EngineConfig(model_path=CKPT, **{**ENGINE_ARGS, "graphs": "off", "page_size": page_size}))
    greedy = SamplingParams(max_new_tokens=6, ignore_eos=True)
    plain = [LONG, MID + "\n\n" + SHORT]
    alone = [o.output_ids for o in engine.generate(plain, greedy)]
    before = engine.cache_stats()
    scored = [LONG + "\n\n" + SHORT, MID, SHORT]
    reqs = [
        engine.add_request(p, SamplingParams(max_new_tokens=n), prompt_logprobs=1) for p, n in zip(scored, (0, 2, 0))
    ]
    again = [engine.add_request(p, greedy) for p in plain]
    outs = {o.rid: o for o in engine.run_until_done()}
    assert [outs[r.rid].output_ids for r in again] == alone
    assert all(outs[r.rid].cached_tokens > 0 for r in again) and not any(outs[r.rid].cached_tokens for r in reqs)
    for req, prompt, n in zip(reqs, scored, (0, 2, 0)):
        out = outs[req.rid]
        got = [None if p is None else p.logprob for p in out.prompt_logprobs]
        assert len(out.output_ids) == n and out.finish_reason.value == "length"
        assert worst_diff(got, oracle.token_logprobs(oracle.ids(prompt))) <= TOL
    after = engine.cache_stats()
    assert (after.tokens, after.swa_tokens) == (before.tokens, before.swa_tokens)  # the plain repeats added nothing
    engine.tree_cache.sanity_check()
    assert engine.pools_idle()
