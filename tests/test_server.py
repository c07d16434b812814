"""The OpenAI-compatible server, in process: aiohttp's TestServer/TestClient on a real port, one
EngineWorker thread owning the engine, and a second engine on the same checkpoint as the reference."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer

from fixtures.checkpoints import untied_checkpoint
from fixtures.tokenized import prompt_text, tokenized_checkpoint
from harness.engine import Engine, EngineConfig, SamplingParams
from harness.http_server.app import build_app
from harness.http_server.chat import ChatRenderer, fallback_prompt
from harness.http_server.cli import ready_url
from harness.http_server.protocol import ChatMessage
from harness.http_server.worker import EngineWorker
from harness.servers.counters import prometheus_sums
from harness.servers.harness_server import HarnessServer
from tests.waits import SERVER_START_S, scaled

MODEL = "tiny-swa"
T = TypeVar("T")
ENGINE_ARGS: dict[str, Any] = dict(
    graphs="tape", max_running_requests=32, chunk_size=16, max_prefill_tokens=64, num_threads=1
)

# -- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tokenized_checkpoint(tmp_path_factory.mktemp("server") / "ckpt")


@pytest.fixture(scope="module")
def ref(ckpt: Path) -> Engine:
    """Reference engine, same config as the served one, driven directly by the test thread."""
    return Engine(EngineConfig(model_path=ckpt, **ENGINE_ARGS))


def _worker(ckpt: Path) -> EngineWorker:
    return EngineWorker(lambda: Engine(EngineConfig(model_path=ckpt, **ENGINE_ARGS))).start(
        timeout=scaled(SERVER_START_S)
    )


@pytest.fixture(scope="module")
def worker(ckpt: Path) -> Iterator[EngineWorker]:
    w = _worker(ckpt)
    yield w
    w.stop()


@pytest.fixture
def fresh_worker(ckpt: Path) -> Iterator[EngineWorker]:
    """A worker of its own, for tests that read its counters or break its engine."""
    w = _worker(ckpt)
    yield w
    w.stop()


def serve(worker: EngineWorker, body: Callable[[TestClient], Awaitable[T]]) -> T:
    async def main() -> T:
        async with TestClient(TestServer(build_app(worker, MODEL))) as client:
            return await body(client)

    return asyncio.run(main())


async def post(client: TestClient, path: str, payload: Any) -> tuple[int, dict]:
    resp: ClientResponse = await client.post(path, json=payload)
    return resp.status, await resp.json()


def completion(worker: EngineWorker, payload: dict) -> tuple[int, dict]:
    return serve(worker, lambda c: post(c, "/v1/completions", payload))


def greedy(ref: Engine, prompt: str | list[int], max_tokens: int, stop: tuple[str, ...] = ()):
    return ref.generate([prompt], SamplingParams(max_new_tokens=max_tokens, stop=stop))[0]


# -- completions ---------------------------------------------------------------------------------


def test_completion_greedy_matches_engine_generate(worker: EngineWorker, ref: Engine) -> None:
    for i, max_tokens in ((0, 12), (1, 20), (2, 1)):
        prompt = prompt_text(i)
        status, body = completion(
            worker, {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        )
        assert status == 200, body
        want = greedy(ref, prompt, max_tokens)
        assert want.text, "the reference produced no text: the test would prove nothing"
        assert body["object"] == "text_completion" and body["model"] == MODEL and body["id"].startswith("cmpl-")
        [choice] = body["choices"]
        assert choice == {"text": want.text, "index": 0, "logprobs": None, "finish_reason": want.finish_reason.value}
        usage = dict(body["usage"])
        cached = usage.pop("prompt_tokens_details")["cached_tokens"]
        assert usage == {
            "prompt_tokens": len(want.prompt_ids),
            "completion_tokens": len(want.output_ids),
            "total_tokens": len(want.prompt_ids) + len(want.output_ids),
        }
        assert 0 <= cached < len(want.prompt_ids), body["usage"]


def test_completion_logprobs_are_the_engines_softmax(worker: EngineWorker, ref: Engine) -> None:
    """Per generated token: its logprob and the top 5 of the full softmax of the logits the engine computed, keyed by
    text (or ``token_id:N``), with the text's offsets; the answer is the same as without logprobs."""
    prompt = prompt_text(3)
    req = ref.add_request(prompt, SamplingParams(max_new_tokens=6), return_logits=True)
    want = next(o for o in ref.run_until_done() if o.rid == req.rid)
    logp = torch.log_softmax(want.logits.double(), -1)
    for by_id in (False, True):
        payload = {"model": MODEL, "prompt": prompt, "max_tokens": 6, "temperature": 0, "logprobs": 5}
        status, body = completion(worker, {**payload, "return_tokens_as_token_ids": by_id})
        assert status == 200, body
        [choice] = body["choices"]
        assert choice["text"] == want.text
        lp = choice["logprobs"]
        name = (
            (lambda t: f"token_id:{t}") if by_id else (lambda t: ref.tokenizer.decode([t], skip_special_tokens=False))
        )
        assert lp["tokens"] == [name(t) for t in want.output_ids]
        ids = want.output_ids
        assert lp["text_offset"] == [len(ref.tokenizer.decode(ids[:k], skip_special_tokens=False)) for k in range(6)]
        for step, (t, got, tops) in enumerate(zip(want.output_ids, lp["token_logprobs"], lp["top_logprobs"])):
            assert abs(got - logp[step, t].item()) < 1e-5, (step, got)
            values, ids = logp[step].topk(5)
            if by_id:
                assert tops == pytest.approx({name(i): v for i, v in zip(ids.tolist(), values.tolist())}, abs=1e-5)
            assert sorted(tops.values(), reverse=True) == pytest.approx(values.tolist()[: len(tops)], abs=1e-5)


def test_a_later_turn_is_served_from_the_prefix_cache_and_answers_as_without_it(
    fresh_worker: EngineWorker, ckpt: Path
) -> None:
    """The next turn of a conversation reuses the first turn's KV (``usage.prompt_tokens_details.cached_tokens``,
    OpenAI's field; /health counts it) and answers exactly as an engine with the cache off."""
    cold = Engine(EngineConfig(model_path=ckpt, prefix_cache=False, **ENGINE_ARGS))
    first = cold.tokenizer.encode(prompt_text(5, 2))
    status, body = completion(fresh_worker, {"prompt": first, "max_tokens": 24, "temperature": 0})
    assert status == 200, body
    answer = greedy(cold, first, 24)
    assert body["choices"][0]["text"] == answer.text
    second = first + answer.output_ids + cold.tokenizer.encode(" " + prompt_text(2, 7))  # ids: no re-tokenization
    status, body = completion(fresh_worker, {"prompt": second, "max_tokens": 16, "temperature": 0})
    assert status == 200, body
    want = greedy(cold, second, 16)
    assert body["choices"][0]["text"] == want.text
    cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert len(first) <= cached < len(second), body["usage"]
    status, health = serve(fresh_worker, lambda c: _get(c, "/health"))
    stats = health["pools"]["prefix_cache"]
    assert stats["enabled"] and stats["cached_tokens"] == cached and stats["tokens"] > 0, stats

    async def metrics(client: TestClient) -> tuple[int, str, str]:
        resp = await client.get("/metrics")
        return resp.status, resp.content_type, await resp.text()

    status, kind, text = serve(fresh_worker, metrics)  # the same counts, as Prometheus text (as SGLang and vLLM)
    assert status == 200 and kind == "text/plain", (status, kind)
    sums = prometheus_sums(text, tuple(HarnessServer.cache_metrics.values()) + ("swa_harness:num_requests_total",))
    assert sums == {
        "swa_harness:prompt_tokens_total": len(first) + len(second),
        "swa_harness:cached_tokens_total": cached,
        "swa_harness:evicted_tokens_total": 0,
        "swa_harness:swa_evicted_tokens_total": 0,
        "swa_harness:swa_tombstoned_tokens_total": 0,
        "swa_harness:num_requests_total": 2,
    }, sums
    assert "# TYPE swa_harness:cached_tokens_total counter" in text and 'path="decode-graph"' in text, text


def test_flush_cache_empties_the_tree_so_a_repeat_is_computed_afresh(fresh_worker: EngineWorker, ref: Engine) -> None:
    """SGLang's ``/flush_cache``: after it, the same prompt hits nothing and answers the same; while a request
    runs it refuses (409) and flushes nothing. One new token each, so that the prompt's last window still holds
    SWA KV when the repeat comes (a longer answer slides it out and leaves the prompt's end unmatchable)."""
    prompt = ref.tokenizer.encode(prompt_text(3, 4))
    payload = {"prompt": prompt, "max_tokens": 1, "temperature": 0}

    async def session(client: TestClient) -> list[tuple[int, dict]]:
        first = await post(client, "/v1/completions", payload)
        repeat = await post(client, "/v1/completions", payload)
        running = asyncio.ensure_future(post(client, "/v1/completions", {**payload, "max_tokens": 200}))
        while fresh_worker.stats().running == 0 and not running.done():
            await asyncio.sleep(0.001)
        refused = await post(client, "/flush_cache", {})
        await running
        flushed = (resp := await client.get("/flush_cache")).status, await resp.json()
        fresh = await post(client, "/v1/completions", payload)
        return [first, repeat, refused, flushed, fresh]

    first, repeat, refused, flushed, fresh = serve(fresh_worker, session)
    hits = [body["usage"]["prompt_tokens_details"]["cached_tokens"] for _, body in (first, repeat, fresh)]
    assert hits[0] == 0 and hits[1] > 0 and hits[2] == 0, hits
    assert refused[0] == 409 and "requests are queued or running" in refused[1]["error"]["message"], refused
    assert flushed == (200, {"flushed": True}), flushed
    texts = {body["choices"][0]["text"] for _, body in (first, repeat, fresh)}
    assert texts == {greedy(ref, prompt, 1).text}, texts


async def _get(client: TestClient, path: str) -> tuple[int, dict]:
    resp = await client.get(path)
    return resp.status, await resp.json()


def test_default_max_tokens_is_16_and_token_id_prompts(worker: EngineWorker, ref: Engine) -> None:
    ids = ref.tokenizer.encode(prompt_text(3))
    status, body = completion(worker, {"prompt": ids})  # no model, no max_tokens: OpenAI defaults
    assert status == 200, body
    want = greedy(ref, ids, 16)
    assert body["choices"][0]["text"] == want.text
    assert body["usage"]["completion_tokens"] == len(want.output_ids)


def test_list_prompt_one_choice_per_prompt_in_order(worker: EngineWorker, ref: Engine) -> None:
    prompts = [prompt_text(4, 3), prompt_text(5, 9), prompt_text(6, 5)]
    status, body = completion(worker, {"prompt": prompts, "max_tokens": 10})
    assert status == 200, body
    want = ref.generate(prompts, SamplingParams(max_new_tokens=10))
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert [c["text"] for c in body["choices"]] == [w.text for w in want]
    assert body["usage"]["prompt_tokens"] == sum(len(w.prompt_ids) for w in want)


def test_stop_string_is_cut_server_side(worker: EngineWorker, ref: Engine) -> None:
    prompt = prompt_text(3)
    full = greedy(ref, prompt, 24).text
    # the first word from the 4th on whose first occurrence (as a substring) is that word itself
    words, offsets, at = full.split(" "), [], 0
    for w in words:
        offsets.append(at)
        at += len(w) + 1
    stop, cut = next((w, o) for w, o in list(zip(words, offsets))[3:] if full.find(w) == o)
    status, body = completion(worker, {"prompt": prompt, "max_tokens": 24, "stop": [stop, "never seen here"]})
    assert status == 200, body
    [choice] = body["choices"]
    assert choice["text"] == full[:cut] == greedy(ref, prompt, 24, (stop,)).text
    assert choice["finish_reason"] == "stop"
    # a single string works the same way
    _, body = completion(worker, {"prompt": prompt, "max_tokens": 24, "stop": stop})
    assert body["choices"][0]["text"] == full[:cut]


def test_seeded_sampling_is_reproducible(worker: EngineWorker, ref: Engine) -> None:
    prompt = prompt_text(8)
    payload = {"prompt": prompt, "max_tokens": 16, "temperature": 1.0, "seed": 1234}
    first, second = completion(worker, payload)[1], completion(worker, payload)[1]
    other = completion(worker, {**payload, "seed": 4321})[1]
    texts = [b["choices"][0]["text"] for b in (first, second, other)]
    want = ref.generate([prompt], SamplingParams(max_new_tokens=16, temperature=1.0, seed=1234))[0].text
    assert texts[0] == texts[1] == want
    assert texts[2] != texts[0]
    assert texts[0] != greedy(ref, prompt, 16).text


def test_harmless_openai_fields_are_accepted(worker: EngineWorker, ref: Engine) -> None:
    prompt = prompt_text(9)
    extra = {
        "n": 1,
        "best_of": 1,
        "stream": False,
        "echo": False,
        "logprobs": None,
        "top_p": 0.9,
        "top_k": 40,
        "min_p": 0.1,
        "frequency_penalty": 0,
        "presence_penalty": 0.0,
        "repetition_penalty": 1.0,
        "logit_bias": {},
        "user": "eval",
        "do_sample": False,
        "suffix": None,
        "seed": 1234,
        "stop": [],
    }
    status, body = completion(worker, {"prompt": prompt, "max_tokens": 8, "temperature": 0.0, **extra})
    assert status == 200, body
    assert body["choices"][0]["text"] == greedy(ref, prompt, 8).text


def test_concurrent_requests_are_batched(fresh_worker: EngineWorker, ref: Engine) -> None:
    prompts = [prompt_text(10 + i, 4 + i) for i in range(8)]

    async def body(client: TestClient) -> list[tuple[int, dict]]:
        return await asyncio.gather(
            *(post(client, "/v1/completions", {"prompt": p, "max_tokens": 16}) for p in prompts)
        )

    results = serve(fresh_worker, body)
    want = ref.generate(prompts, SamplingParams(max_new_tokens=16))
    assert [status for status, _ in results] == [200] * 8
    assert [b["choices"][0]["text"] for _, b in results] == [w.text for w in want]
    stats = fresh_worker.stats()
    assert stats.requests_served == 8 and stats.jobs_served == 8
    assert stats.max_decode_batch_size > 1, stats  # the engine ran them together, not one by one
    assert stats.engine_failures == 0 and stats.running == 0


# -- errors --------------------------------------------------------------------------------------

LONG = " ".join(["the"] * 300)  # 301 tokens with BOS; the context is 256

BAD_COMPLETIONS = [
    # (payload, param, words the message must contain)
    ({"max_tokens": 4}, "prompt", "prompt"),
    ({"prompt": 3}, "prompt", "prompt must be"),
    ({"prompt": []}, "prompt", "empty"),
    ({"prompt": ["a", 1]}, "prompt", "prompt must be"),
    ({"prompt": "the", "max_tokens": "5"}, "max_tokens", "max_tokens must be an integer"),
    ({"prompt": "the", "max_tokens": True}, "max_tokens", "max_tokens must be an integer"),
    ({"prompt": "the", "max_tokens": 0}, "max_tokens", "[1, 256]"),
    ({"prompt": "the", "max_tokens": 257}, "max_tokens", "[1, 256]"),
    ({"prompt": "the", "temperature": "hot"}, "temperature", "temperature must be a number"),
    ({"prompt": "the", "temperature": -0.5}, "temperature", ">= 0"),
    ({"prompt": "the", "seed": "x"}, "seed", "seed must be an integer"),
    ({"prompt": "the", "seed": -1}, "seed", "seed must be in"),
    ({"prompt": "the", "stop": 5}, "stop", "stop must be"),
    ({"prompt": "the", "stop": [""]}, "stop", "must not be empty"),
    ({"prompt": "the", "n": 2}, "n", "n must be 1"),
    ({"prompt": "the", "stream": "yes"}, "stream", "stream must be a boolean"),
    ({"prompt": "the", "stream_options": {"include_usage": True}}, "stream_options", "only allowed with stream=true"),
    ({"prompt": "the", "echo": "yes"}, "echo", "echo must be a boolean"),
    ({"prompt": "the", "echo": True, "stream": True}, "echo", "not supported with stream=true"),
    ({"prompt": "the", "best_of": 3}, "best_of", "best_of"),
    ({"prompt": "the", "logprobs": 21}, "logprobs", "logprobs must be in [0, 20], got 21"),
    ({"prompt": "the", "logprobs": "5"}, "logprobs", "logprobs must be an integer"),
    ({"prompt": "the", "logprobs": 5, "return_tokens_as_token_ids": 1}, "return_tokens_as_token_ids", "boolean"),
    ({"prompt": "the", "top_p": 0.5, "temperature": 0.7, "seed": 1}, "top_p", "nucleus"),
    ({"prompt": "the", "top_k": 5, "temperature": 0.7}, "top_k", "top_k"),
    ({"prompt": "the", "frequency_penalty": 0.5}, "frequency_penalty", "frequency_penalty"),
    ({"prompt": "the", "do_sample": True}, "do_sample", "do_sample"),
    ({"prompt": "the", "foo": 1, "bar": 2}, "bar", "unknown field(s): bar, foo"),
    ({"prompt": "the", "stop_token_ids": [500]}, "stop_token_ids", "stop_token_ids"),
    ({"prompt": LONG, "max_tokens": 4}, "prompt", "this engine allows 256"),
    ({"prompt": prompt_text(0, 200), "max_tokens": 100}, "max_tokens", "max_tokens (100) needs 301 tokens"),
    ({"prompt": prompt_text(0, 250)}, "max_tokens", "max_tokens (16, the default)"),
    ({"prompt": ["the cat", LONG]}, "prompt", "prompt[1]: prompt (301 tokens)"),
    ({"prompt": [[2, 4, 500]]}, "prompt", "outside [0, 128)"),
]


def test_bad_requests_get_400_naming_the_field(worker: EngineWorker, ref: Engine) -> None:
    async def body(client: TestClient) -> None:
        for payload, param, words in BAD_COMPLETIONS:
            status, out = await post(client, "/v1/completions", payload)
            assert status == 400, (payload, out)
            err = out["error"]
            assert err["type"] == "invalid_request_error" and err["param"] == param, (payload, err)
            assert words in err["message"], (payload, err["message"])
        for raw, words in (
            (b"{not json", "not valid JSON"),
            (b'{"prompt": "a", "temperature": NaN}', "NaN"),
            (b"[1, 2]", "JSON object"),
            (b"", "not valid JSON"),
        ):
            resp = await client.post("/v1/completions", data=raw, headers={"Content-Type": "application/json"})
            out = await resp.json()
            assert resp.status == 400 and words in out["error"]["message"], (raw, out)
        status, out = await post(client, "/v1/completions", {"prompt": "the", "model": "other"})
        assert status == 404 and out["error"]["param"] == "model" and "tiny-swa" in out["error"]["message"]
        resp = await client.get("/v1/completions")
        assert resp.status == 405 and "error" in await resp.json()
        resp = await client.post("/v1/nothing", json={})
        assert resp.status == 404 and "error" in await resp.json()
        # ...and the server still serves, with nothing left behind in the engine
        prompt = prompt_text(11)
        status, out = await post(client, "/v1/completions", {"prompt": prompt, "max_tokens": 6})
        assert status == 200 and out["choices"][0]["text"] == greedy(ref, prompt, 6).text

    serve(worker, body)
    stats = worker.stats()
    assert stats.running == 0 and stats.engine_failures == 0
    assert not worker.engine.scheduler.has_work()  # a refused list prompt queued nothing


def test_engine_failure_gives_500_and_the_next_request_succeeds(
    fresh_worker: EngineWorker, ref: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deterministic on a loaded machine (it failed 2 of 4 runs there): the first forward waits until the other
    client's job is queued, so the failure always lands with all 3 prompts in flight."""
    engine = fresh_worker.engine
    real_forward = engine.runner.forward
    calls = {"n": 0}

    def in_engine() -> int:
        return len(engine.scheduler.running) + len(engine.scheduler.waiting)

    def flaky_forward(batch):
        calls["n"] += 1
        if calls["n"] == 1:  # one job in: hold its first forward until the other waits in the worker's queue
            deadline = time.monotonic() + scaled(60)
            while in_engine() < 3 and fresh_worker._queue.qsize() == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
        if in_engine() == 3 and not calls.get("failed"):  # mid-generation, with both jobs' 3 prompts in flight
            calls["failed"] = 1
            raise RuntimeError("injected forward failure")
        return real_forward(batch)

    monkeypatch.setattr(engine.runner, "forward", flaky_forward)
    prompt = prompt_text(12)

    async def body(client: TestClient) -> tuple[list, tuple[int, dict]]:
        failed = await asyncio.gather(
            post(client, "/v1/completions", {"prompt": prompt, "max_tokens": 8}),
            post(client, "/v1/completions", {"prompt": [prompt, "the cat"], "max_tokens": 8}),
        )
        return failed, await post(client, "/v1/completions", {"prompt": prompt, "max_tokens": 8})

    failed, (status, out) = serve(fresh_worker, body)
    for fstatus, fout in failed:
        assert fstatus == 500, fout
        assert fout["error"]["type"] == "server_error" and "injected forward failure" in fout["error"]["message"]
    assert status == 200, out
    assert out["choices"][0]["text"] == greedy(ref, prompt, 8).text
    stats = fresh_worker.stats()
    assert stats.engine_failures == 1 and stats.requests_failed == 3 and stats.running == 0
    assert engine.pools_idle()  # abort_all gave every slot back


# -- chat, models, health ------------------------------------------------------------------------


def test_chat_completion_uses_the_chat_template(worker: EngineWorker, ref: Engine, ckpt: Path) -> None:
    messages = [
        {"role": "user", "content": "how is the water"},
        {"role": "assistant", "content": "good"},
        {"role": "user", "content": [{"type": "text", "text": "and the "}, {"type": "text", "text": "day"}]},
    ]
    status, body = serve(
        worker,
        lambda c: post(
            c,
            "/v1/chat/completions",
            {"model": MODEL, "messages": messages, "max_tokens": 10, "temperature": 0, "seed": 1234, "stop": []},
        ),
    )
    assert status == 200, body
    rendered = (
        "<bos><start_of_turn>user how is the water<end_of_turn> <start_of_turn>assistant good<end_of_turn> "
        "<start_of_turn>user and the day<end_of_turn> <start_of_turn>assistant"
    )
    ids = ref.tokenizer.tokenizer.encode(rendered, add_special_tokens=False).ids
    assert ids[0] == 2 and ids.count(2) == 1  # the template's BOS, not doubled
    want = greedy(ref, ids, 10)
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": want.text},
            "logprobs": None,
            "finish_reason": want.finish_reason.value,
        }
    ]
    assert body["usage"]["prompt_tokens"] == len(ids)


def test_chat_errors(worker: EngineWorker) -> None:
    cases = [
        ({"max_tokens": 4}, "messages", "missing required field 'messages'"),
        ({"messages": []}, "messages", "non-empty list"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages", "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages", "messages[0].content"),
        ({"messages": [{"role": "user", "content": "hi", "tool_calls": []}]}, "messages", "tool_calls"),
        ({"messages": [{"role": "system", "content": "be brief"}]}, "messages", "System role not supported"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": []}, "tools", "unknown field(s): tools"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "max_completion_tokens": 4},
            "max_completion_tokens",
            "disagree",
        ),
        ({"messages": [{"role": "user", "content": LONG}]}, "messages", "this engine allows 256"),
    ]

    async def body(client: TestClient) -> None:
        for payload, param, words in cases:
            status, out = await post(client, "/v1/chat/completions", payload)
            assert status == 400 and out["error"]["param"] == param, (payload, out)
            assert words in out["error"]["message"], (payload, out)

    serve(worker, body)


def test_chat_fallback_without_a_template(tmp_path: Path, ref: Engine) -> None:
    renderer = ChatRenderer.from_dir(tmp_path, ref.tokenizer)  # no tokenizer_config.json here
    messages = [ChatMessage("system", "be brief"), ChatMessage("user", "how is the water")]
    assert renderer.source == "fallback"
    assert (
        renderer.prompt(messages) == fallback_prompt(messages) == "system: be brief\nuser: how is the water\nassistant:"
    )


def test_models_and_health(worker: EngineWorker) -> None:
    async def body(client: TestClient) -> tuple[dict, dict]:
        models = await (await client.get("/v1/models")).json()
        resp = await client.get("/health")
        assert resp.status == 200
        return models, await resp.json()

    models, health = serve(worker, body)
    assert models["object"] == "list"
    assert [(m["id"], m["object"], m["max_model_len"]) for m in models["data"]] == [(MODEL, "model", 256)]
    assert health["status"] == "ok" and health["model"] == MODEL and health["graph_mode"] == "tape"
    assert health["chat_template"] == "chat_template"
    assert {"requests_served", "max_decode_batch_size", "engine_failures", "steps"} <= set(health["stats"])


def test_build_app_refuses_a_checkpoint_without_tokenizer() -> None:
    w = EngineWorker(Engine(EngineConfig(model_path=untied_checkpoint("gemma2"), graphs="off"))).start()
    try:
        with pytest.raises(ValueError, match="no tokenizer.json"):
            build_app(w, MODEL)
    finally:
        w.stop()


def test_stopped_worker_answers_503(ckpt: Path) -> None:
    w = EngineWorker(lambda: Engine(EngineConfig(model_path=ckpt, graphs="off"))).start()
    w.stop()

    async def body(client: TestClient) -> tuple[int, dict]:
        return await post(client, "/v1/completions", {"prompt": "the", "max_tokens": 2})

    status, out = serve(w, body)
    assert status == 503 and "not running" in out["error"]["message"]


def test_stop_fails_requests_in_flight_with_503(ckpt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = EngineWorker(lambda: Engine(EngineConfig(model_path=ckpt, graphs="off"))).start()
    real_forward = w.engine.runner.forward

    def slow_forward(batch):
        time.sleep(0.02)
        return real_forward(batch)

    monkeypatch.setattr(w.engine.runner, "forward", slow_forward)

    async def body(client: TestClient) -> tuple[int, dict]:
        task = asyncio.create_task(post(client, "/v1/completions", {"prompt": "the", "max_tokens": 200}))
        while w.stats().steps < 2:
            await asyncio.sleep(0.01)
        await asyncio.get_running_loop().run_in_executor(None, w.stop)
        return await task

    status, out = serve(w, body)
    assert status == 503 and "shutting down" in out["error"]["message"], out
    assert w.engine.pools_idle()


def test_ready_url_reports_an_address_clients_can_reach() -> None:
    assert ready_url(("127.0.0.1", 8123)) == "http://127.0.0.1:8123"
    assert ready_url(("0.0.0.0", 8123)) == "http://127.0.0.1:8123"
    assert ready_url(("::", 8123, 0, 0)) == "http://[::1]:8123"
    assert ready_url(("10.1.2.3", 80)) == "http://10.1.2.3:80"


# -- reliability (issue 15): one bad request harms no other ------------------------------------------


def test_a_sampling_failure_fails_only_its_own_request(
    fresh_worker: EngineWorker, ref: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of NaN logits (a broken forward for one request) fail that request alone, greedy or sampled."""
    import harness.engine.engine as engine_module

    real_sample = engine_module.sample

    def poisoned(logits, reqs):
        logits = logits.clone()
        for row, req in enumerate(reqs):
            if req.sampling.seed == 666:
                logits[row] = float("nan")
        return real_sample(logits, reqs)

    monkeypatch.setattr(engine_module, "sample", poisoned)
    prompts = [prompt_text(20 + i) for i in range(4)]
    payloads = [
        {"prompt": prompts[0], "max_tokens": 10},
        {"prompt": prompts[1], "max_tokens": 10, "temperature": 0.8, "seed": 1},
        {"prompt": prompts[2], "max_tokens": 10, "temperature": 0.8, "seed": 666},
        {"prompt": prompts[3], "max_tokens": 10, "seed": 666},
        {"prompt": [prompts[0], prompts[1]], "max_tokens": 10},
    ]

    async def body(client: TestClient) -> list[tuple[int, dict]]:
        return await asyncio.wait_for(asyncio.gather(*(post(client, "/v1/completions", p) for p in payloads)), 60)

    results = serve(fresh_worker, body)
    assert [status for status, _ in results] == [200, 200, 500, 500, 200], results
    for status, out in results[2:4]:
        assert out["error"]["type"] == "server_error" and "NaN" in out["error"]["message"], out
    assert results[0][1]["choices"][0]["text"] == greedy(ref, prompts[0], 10).text
    sampled = ref.generate([prompts[1]], SamplingParams(max_new_tokens=10, temperature=0.8, seed=1))[0].text
    assert results[1][1]["choices"][0]["text"] == sampled
    assert [c["text"] for c in results[4][1]["choices"]] == [greedy(ref, p, 10).text for p in prompts[:2]]
    stats = fresh_worker.stats()
    assert stats.engine_failures == 0 and stats.requests_failed == 2 and stats.running == 0, stats
    assert fresh_worker.engine.pools_idle()


def test_health_counters_are_current_when_the_response_arrives(
    fresh_worker: EngineWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that reads /health right after its answer sees that answer counted and its slots free."""
    import threading

    real_lock, engine_thread = fresh_worker._lock, fresh_worker._thread

    class SlowOnTheEngineThread:
        """The worker's lock, 0.1 s slower to take on the engine thread: a late counter update shows."""

        def __enter__(self) -> bool:
            if threading.current_thread() is engine_thread:
                time.sleep(0.1)
            return real_lock.__enter__()

        def __exit__(self, *exc: object) -> None:
            real_lock.__exit__(*exc)

    monkeypatch.setattr(fresh_worker, "_lock", SlowOnTheEngineThread())

    async def body(client: TestClient) -> list[dict]:
        seen = []
        for i in range(3):
            status, out = await asyncio.wait_for(
                post(client, "/v1/completions", {"prompt": prompt_text(30 + i), "max_tokens": 3}), 60
            )
            assert status == 200, out
            seen.append(await (await client.get("/health")).json())
        return seen

    seen = serve(fresh_worker, body)
    assert [h["stats"]["requests_served"] for h in seen] == [1, 2, 3]
    assert [h["stats"]["running"] for h in seen] == [0, 0, 0]
    assert all(h["pools"]["idle"] and h["pools"]["req_rows"]["used"] == 0 for h in seen), seen


def test_large_prompts_are_tokenized_off_the_event_loop(fresh_worker: EngineWorker) -> None:
    """Tokenizing a few MB takes about a second; /health must keep answering meanwhile."""
    from dataclasses import replace

    from harness.http_server.app import STATE_KEY

    unit = " ".join(prompt_text(i, 50) for i in range(400))  # ~90 kB
    start = time.perf_counter()
    fresh_worker.engine.tokenizer.encode(unit)
    per_unit = time.perf_counter() - start
    prompt = " ".join([unit] * min(80, max(1, round(1.0 / max(per_unit, 1e-3)))))  # about 1 s of tokenizing
    app = build_app(fresh_worker, MODEL)
    app[STATE_KEY]["limits"] = replace(app[STATE_KEY]["limits"], max_prompt_chars=len(prompt))

    async def main() -> tuple[int, dict, float, list[float]]:
        async with TestClient(TestServer(app)) as client:
            gaps: list[float] = []  # between answers of a 10 ms /health loop: a frozen event loop shows here
            start = last = time.perf_counter()
            big = asyncio.create_task(post(client, "/v1/completions", {"prompt": prompt, "max_tokens": 2}))
            while not big.done():
                await asyncio.wait_for((await client.get("/health")).read(), 30)
                await asyncio.sleep(0.01)
                gaps.append(time.perf_counter() - last)
                last = time.perf_counter()
            status, out = await asyncio.wait_for(big, 30)
            return status, out, time.perf_counter() - start, gaps

    status, out, took, gaps = asyncio.run(main())
    assert status == 400 and "this engine allows 256" in out["error"]["message"], out  # tokenized, then too long
    assert took > 0.5, f"tokenizing took only {took:.2f} s: the test would prove nothing"
    assert max(gaps) < 0.3, f"/health went unanswered for {max(gaps):.2f} s while tokenizing for {took:.2f} s"


def test_server_tokenization_equals_the_engine_tokenizer(ref: Engine) -> None:
    from harness.model import Tokenizer
    from harness.http_server.app import releasing_gil

    shipped = Tokenizer.from_dir(Path(__file__).resolve().parents[1] / "fixtures" / "models" / "gemma2-tiny-swa")
    texts = ["", "the cat", prompt_text(3, 40), "Question: 3 + 4?\nAnswer: 7 \u00e9\U0001f600", "  two  spaces \n"]
    for tokenizer in (ref.tokenizer, shipped):
        for text in texts:
            assert releasing_gil(tokenizer).encode(text) == tokenizer.encode(text), text
