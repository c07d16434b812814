"""Reliability of the served engine under hostile input and load (issue 15).

One server subprocess on the shipped tiny checkpoint, loopback only, reached over real HTTP. Every
test bounds its own run time (client timeouts, ``asyncio.wait_for``, counted loops), so a regression
fails the test instead of hanging the suite: one bad request must harm no other, a client that goes
away must give its slots back, and the pools must be idle once the load is gone.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from harness.servers.harness_server import launch_server
from harness.servers.lifecycle import ServerProcess
from tests.waits import SERVER_START_S, scaled

REPO = Path(__file__).resolve().parents[1]
CHECKPOINT = REPO / "fixtures" / "models" / "gemma2-tiny-swa"
SERVED = "tiny"
T = TypeVar("T")
Result = tuple[int, dict, float]  # status, JSON body, seconds


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    log = tmp_path_factory.mktemp("reliability") / "server.log"
    proc = launch_server(
        CHECKPOINT,
        "tape",
        served_model_name=SERVED,
        max_running=32,
        num_threads=1,
        log_path=log,
        timeout=scaled(SERVER_START_S),
        env={"OMP_NUM_THREADS": "1"},
    )
    try:
        yield proc
    finally:
        proc.stop(timeout=20)


def run(body: Callable[[aiohttp.ClientSession], Awaitable[T]], limit_s: float) -> T:
    """Run ``body`` with a fresh client session; the whole thing is cut off after ``limit_s`` seconds."""

    async def main() -> T:
        connector = aiohttp.TCPConnector(limit=128)
        async with aiohttp.ClientSession(connector=connector) as session:
            return await asyncio.wait_for(body(session), limit_s)

    return asyncio.run(main())


async def request(
    session: aiohttp.ClientSession, method: str, url: str, *, timeout: float = 30.0, **kwargs: Any
) -> Result:
    start = time.perf_counter()
    async with session.request(method, url, timeout=aiohttp.ClientTimeout(total=timeout), **kwargs) as resp:
        raw = await resp.read()
        body = json.loads(raw) if raw else {}
        return resp.status, body, time.perf_counter() - start


async def complete(
    session: aiohttp.ClientSession, server: ServerProcess, payload: dict, *, timeout: float = 30.0
) -> Result:
    return await request(session, "POST", server.completions_url, json=payload, timeout=timeout)


async def health(session: aiohttp.ClientSession, server: ServerProcess, timeout: float = 10.0) -> dict:
    status, body, _ = await request(session, "GET", f"{server.base_url}/health", timeout=timeout)
    assert status == 200, body
    return body


async def wait_idle(session: aiohttp.ClientSession, server: ServerProcess, limit_s: float = 10.0) -> dict:
    """/health once nothing runs and both pools and the request rows are free again (bounded)."""
    deadline = time.monotonic() + limit_s
    while True:
        body = await health(session, server)
        if body["stats"]["running"] == 0 and body["pools"]["idle"]:
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"the server is not idle {limit_s} s after the load: {body}")
        await asyncio.sleep(0.05)


def questions(n: int) -> list[str]:
    lines = (REPO / "fixtures" / "data" / "gsm_style" / "test.jsonl").read_text().splitlines()
    return [f"Question: {json.loads(line)['question']}\nAnswer:" for line in lines[:n]]


def greedy_text(server: ServerProcess, prompt: str, max_tokens: int) -> str:
    async def body(session: aiohttp.ClientSession) -> str:
        status, out, _ = await complete(session, server, {"prompt": prompt, "max_tokens": max_tokens})
        assert status == 200, out
        return out["choices"][0]["text"]

    return run(body, 30)


# -- 1. a sampling error stays in its request -------------------------------------------------------


def test_tiny_temperature_harms_no_request_in_its_batch(server: ServerProcess) -> None:
    """temperature 1e-40 made sampling NaN, the step raise, and every request in flight fail with 500."""
    prompts = questions(6)
    temperatures = [0.0, 1e-40, 1e-300, 5e-324, 1e-7, 0.0]

    async def body(session: aiohttp.ClientSession) -> list[Result]:
        return await asyncio.gather(
            *(
                complete(session, server, {"prompt": p, "max_tokens": 8, "temperature": t, "seed": 3})
                for p, t in zip(prompts, temperatures)
            )
        )

    results = run(body, 60)
    assert [status for status, _, _ in results] == [200] * len(prompts), [b for _, b, _ in results]
    # below the sampling floor a temperature is greedy decoding
    for prompt, (_, out, _) in zip(prompts, results):
        assert out["choices"][0]["text"] == greedy_text(server, prompt, 8)


# -- 2. malformed text and JSON are the client's error ---------------------------------------------


def test_lone_surrogates_and_deep_json_get_400(server: ServerProcess) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    nested = "[" * 900 + "]" * 900
    bodies = [
        (b'{"prompt": "a\\ud800b", "max_tokens": 2}', "surrogate"),
        (b'{"prompt": ["ok", "\\udfff"], "max_tokens": 2}', "surrogate"),
        (b'{"prompt": "a", "stop": ["\\ud800"], "max_tokens": 2}', "surrogate"),
        (b'{"prompt": "a", "\\ud800": 1}', "surrogate"),
        (b'{"prompt": "a\xed\xa0\x80b"}', "UTF-8"),  # a surrogate encoded as UTF-8 bytes
        (b'{"prompt": ' + deep + b"}", "nested"),
        (deep, "nested"),
        (f'{{"prompt": "a", "user": {nested}}}'.encode(), "user"),
        (f'{{"prompt": "a", "stop": {nested}}}'.encode(), "stop"),
        (f'{{"prompt": "a", "logit_bias": {{"1": {nested}}}}}'.encode(), "logit_bias"),
        (f'{{"prompt": {nested}}}'.encode(), "prompt"),
    ]
    chat = [
        (b'{"messages": [{"role": "user", "content": "hi \\udc00"}]}', "surrogate"),
        (f'{{"messages": [{{"role": "user", "content": {nested}}}]}}'.encode(), "messages"),
    ]

    async def body(session: aiohttp.ClientSession) -> None:
        headers = {"Content-Type": "application/json"}
        for path, cases in (("/v1/completions", bodies), ("/v1/chat/completions", chat)):
            for raw, words in cases:
                status, out, elapsed = await request(session, "POST", server.base_url + path, data=raw, headers=headers)
                assert status == 400, (raw[:60], out)
                assert words in out["error"]["message"] and len(out["error"]["message"]) < 400, (raw[:60], out)
                assert elapsed < 5, (raw[:60], elapsed)
        # a valid surrogate pair (what json.dumps writes for an emoji) is ordinary text
        status, out, _ = await request(
            session,
            "POST",
            server.completions_url,
            headers=headers,
            data=b'{"prompt": "Question: \\ud83d\\ude00\\nAnswer:", "max_tokens": 2}',
        )
        assert status == 200, out
        await wait_idle(session, server)

    run(body, 120)


# -- 3. a huge prompt is refused fast and never freezes the server ----------------------------------


def test_an_8_mb_prompt_is_refused_fast_while_health_answers(server: ServerProcess) -> None:
    prompt = "the cat sat on the mat. " * (8 * 1024 * 1024 // 24)
    latencies: list[float] = []

    async def body(session: aiohttp.ClientSession) -> Result:
        big = asyncio.create_task(complete(session, server, {"prompt": prompt, "max_tokens": 4}, timeout=40))
        while not big.done():
            latencies.append((await request(session, "GET", f"{server.base_url}/health", timeout=40))[2])
            await asyncio.sleep(0.02)
        return await big

    status, out, elapsed = run(body, 60)
    assert status == 413, out
    message = out["error"]["message"]
    assert out["error"]["param"] == "prompt" and "at most" in message and "characters" in message, message
    assert elapsed < 3.0, f"the 8 MB prompt took {elapsed:.1f} s to refuse"
    assert max(latencies, default=0.0) < 1.0, f"/health took up to {max(latencies):.2f} s meanwhile"
    assert greedy_text(server, questions(1)[0], 4)  # still serving


# -- 4. a client that goes away aborts its generation ------------------------------------------------


def test_disconnected_clients_abort_and_free_their_slots(server: ServerProcess) -> None:
    """32 dropped clients with max_tokens 1000 made a new request wait 16 s."""
    prompt = "Question: Noah baked pies.\nAnswer:"

    async def body(session: aiohttp.ClientSession) -> tuple[dict, float, dict]:
        before = (await health(session, server))["stats"]
        dropped = aiohttp.ClientSession()
        tasks = [
            asyncio.create_task(
                complete(dropped, server, {"prompt": prompt, "max_tokens": 1000, "ignore_eos": True}, timeout=60)
            )
            for _ in range(32)
        ]
        deadline = time.monotonic() + 20

        def generating(h: dict) -> bool:  # all 32 admitted, and a step has run: a prompt the prefix cache holds
            return h["pools"]["req_rows"]["used"] == 32 and h["pools"]["full"]["used"] > 0  # owns no slot before it

        while not generating(busy := await health(session, server)):
            assert time.monotonic() < deadline, f"the 32 long requests never all ran: {busy}"
            await asyncio.sleep(0.05)
        assert busy["stats"]["running"] == 32, busy
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await dropped.close()  # the sockets close: the server sees 32 disconnects
        status, out, waited = await complete(session, server, {"prompt": prompt, "max_tokens": 8}, timeout=30)
        assert status == 200, out
        idle = await wait_idle(session, server, limit_s=10)
        return before, waited, idle

    before, waited, idle = run(body, 90)
    assert waited < 3.0, f"a new request waited {waited:.1f} s behind 32 abandoned ones"
    stats = idle["stats"]
    assert stats["requests_cancelled"] - before["requests_cancelled"] == 32, stats
    assert stats["generated_tokens"] - before["generated_tokens"] < 32 * 1000 // 2, stats


# -- 8. /health: pools, and counters that never lag a response -------------------------------------


def test_health_reports_pool_occupancy(server: ServerProcess) -> None:
    async def body(session: aiohttp.ClientSession) -> dict:
        return await wait_idle(session, server)

    pools = run(body, 30)["pools"]
    assert set(pools) == {"full", "swa", "req_rows", "idle", "prefix_cache"}
    for name in ("full", "swa", "req_rows"):
        assert pools[name]["used"] == 0 and pools[name]["size"] > 0, pools
    assert pools["idle"] is True
    cache = pools["prefix_cache"]
    assert cache["enabled"] is True and 0 <= cache["cached_tokens"] <= cache["prompt_tokens"], cache
    assert 0 <= cache["swa_tokens"] <= cache["tokens"] <= pools["full"]["size"], cache


# -- 9. stop list, content type, origin ------------------------------------------------------------


def test_stop_list_is_capped_in_count_and_length(server: ServerProcess) -> None:
    async def body(session: aiohttp.ClientSession) -> list[Result]:
        many = [f"s{i}" for i in range(1_000_000)]
        return [
            await complete(session, server, {"prompt": "a", "max_tokens": 8, "stop": many}, timeout=15),
            await complete(session, server, {"prompt": "a", "max_tokens": 8, "stop": ["x" * 100_000]}),
            await complete(session, server, {"prompt": "a", "max_tokens": 8, "stop_token_ids": [5] * 100_000}),
        ]

    (s1, many, t1), (s2, long, _), (s3, ids, _) = run(body, 60)
    assert s1 == 400 and many["error"]["param"] == "stop" and "at most" in many["error"]["message"], many
    assert t1 < 3.0, f"a 1M-string stop list took {t1:.1f} s to refuse"
    assert len(many["error"]["message"]) < 400, many
    assert s2 == 400 and long["error"]["param"] == "stop" and "characters" in long["error"]["message"], long
    assert s3 == 400 and ids["error"]["param"] == "stop_token_ids" and "at most" in ids["error"]["message"], ids


def test_text_plain_bodies_and_foreign_origins_are_refused(server: ServerProcess) -> None:
    payload = json.dumps({"prompt": "a", "max_tokens": 2})

    async def body(session: aiohttp.ClientSession) -> dict[str, Result]:
        out = {}
        for name, headers in {
            "text/plain": {"Content-Type": "text/plain"},
            "form": {"Content-Type": "application/x-www-form-urlencoded"},
            "no type": {},
            "evil origin": {"Content-Type": "application/json", "Origin": "https://evil.example"},
            "null origin": {"Content-Type": "application/json", "Origin": "null"},
            "local origin": {"Content-Type": "application/json", "Origin": "http://localhost:3000"},
            "loopback origin": {"Content-Type": "application/json; charset=utf-8", "Origin": "http://127.0.0.1:8080"},
        }.items():
            out[name] = await request(
                session,
                "POST",
                server.completions_url,
                data=payload.encode(),
                headers=headers,
                skip_auto_headers=["Content-Type"],
            )
        out["evil health"] = await request(
            session, "GET", f"{server.base_url}/health", headers={"Origin": "https://evil.example"}
        )
        return out

    results = run(body, 60)
    for name in ("text/plain", "form", "no type"):
        status, out, _ = results[name]
        assert status == 415 and "application/json" in out["error"]["message"], (name, out)
    for name in ("evil origin", "null origin", "evil health"):
        status, out, _ = results[name]
        assert status == 403 and "Origin" in out["error"]["message"], (name, out)
    for name in ("local origin", "loopback origin"):
        assert results[name][0] == 200, (name, results[name])


# -- bounded load ------------------------------------------------------------------------------------


def test_64_clients_get_the_answers_of_one_client_and_leave_the_pools_idle(server: ServerProcess) -> None:
    """180 identical + 180 mixed prompts from 64 concurrent clients; every answer equals concurrency 1."""
    same = {"prompt": questions(1)[0], "max_tokens": 8}
    mixed = [
        {"prompt": q, "max_tokens": 4 + i % 9, **({"stop": ["\n"]} if i % 3 == 0 else {})}
        for i, q in enumerate(questions(180))
    ]
    load = [same] * 180 + mixed
    load = [p for pair in zip(load[:180], load[180:]) for p in pair]  # interleaved

    async def body(session: aiohttp.ClientSession) -> tuple[list[str], list[Result], float, dict, dict]:
        before = (await wait_idle(session, server))["stats"]
        reference = []
        for payload in [same, *mixed]:  # concurrency 1
            status, out, _ = await complete(session, server, payload)
            assert status == 200, out
            reference.append(out["choices"][0]["text"])
        gate = asyncio.Semaphore(64)

        async def client(payload: dict) -> Result:
            async with gate:
                return await complete(session, server, payload, timeout=60)

        start = time.perf_counter()
        results = await asyncio.gather(*(client(p) for p in load))
        wall = time.perf_counter() - start
        idle = await wait_idle(session, server)
        return reference, results, wall, before, idle

    reference, results, wall, before, idle = run(body, 120)
    want = [reference[0] if p is same else reference[1 + mixed.index(p)] for p in load]
    assert [status for status, _, _ in results] == [200] * len(load)
    got = [out["choices"][0]["text"] for _, out, _ in results]
    mismatches = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert not mismatches, f"{len(mismatches)} answers differ from concurrency 1, e.g. {mismatches[:3]}"
    stats = idle["stats"]
    assert stats["requests_served"] - before["requests_served"] == len(load) + 1 + len(mixed)
    assert stats["engine_failures"] == before["engine_failures"] and stats["max_decode_batch_size"] > 1
    assert idle["pools"]["idle"]
    print(f"load: {len(load)} requests from 64 clients in {wall:.2f} s")
