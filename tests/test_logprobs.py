"""The logprob axis (harness/evals/logprobs.py): per-item statistics on synthetic logprobs, the task verdict against
thresholds, the committed calibration, the recording proxy (harness/jobs/logprob_proxy.py) against a fake server,
and the saved run's logprobs beside it."""

from __future__ import annotations

import json
import math
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench.logprob_thresholds import derive, leave_one_out
from harness.evals.logprobs import (
    REST_FLOOR,
    THRESHOLDS_FILE,
    LogprobLimits,
    LogprobThresholds,
    compare_item,
    judge_logprobs,
    load_thresholds,
)
from harness.evals.compare import compare_runs, summarize
from harness.evals.results import (
    ItemResult,
    RunRecord,
    RunResult,
    ServedIdentity,
    TaskComparison,
    TokenLogprobs,
    Verdict,
)
from harness.jobs.logprob_proxy import LogprobRecorder, load_records, prompt_key
from harness.jobs.plan_file import plan_from_file
from harness.paths import REPO
from harness.report.render import render_html

LN = math.log


def gen(tokens: str, chosen: list[float], second: float = LN(0.1)) -> TokenLogprobs:
    """One generation: each token its logprob, top-2 of it and a runner-up ``z`` at ``second``."""
    return TokenLogprobs(tuple(tokens), tuple(chosen), tuple(((t, lp), ("z", second)) for t, lp in zip(tokens, chosen)))


def thresholds(amber: float = 1e-5, red: float = 1e-3) -> LogprobThresholds:
    return LogprobThresholds("harness/float32", LogprobLimits(amber, amber**2), LogprobLimits(red, red**2), 20)


def test_identical_generations_compare_to_zero_on_every_position():
    a = gen("abcd", [LN(0.8)] * 4)
    item = compare_item("t/0", a, a)
    assert (item.parted_at, item.compared, item.max_abs_delta, item.max_kl) == (None, 4, 0.0, 0.0)


def test_the_chosen_tokens_largest_change_and_the_bucketed_kl():
    off = gen("abc", [LN(0.8), LN(0.8), LN(0.8)])
    on = gen("abc", [LN(0.8), LN(0.6), LN(0.8)], second=LN(0.1))
    item = compare_item("t/0", on, off)
    assert item.parted_at is None and item.max_abs_delta == pytest.approx(LN(0.8) - LN(0.6))
    # position 1: buckets a, z, rest: P = (.8, .1, .1), Q = (.6, .1, .3); KL(P||Q) there, 0 elsewhere
    kl = 0.8 * LN(0.8 / 0.6) + 0.1 * LN(0.1 / 0.3)
    assert item.max_kl == pytest.approx(kl)  # the worst position


def test_a_rest_bucket_below_float32_rounding_moves_no_kl_and_a_real_move_to_the_tail_does():
    """One position of SGLang's clean arms (the fault-effects run, AIME-style): the chosen token moved by 1.2e-7 and
    1 - sum(top-5) read -4.6e-8 in one arm, +5.7e-8 in the other. Read as the tail, that rounding put 3.8e-5 nats of
    KL there; floored and normalized, the KL is of the order of the change squared. Mass that really leaves the
    top-k still counts in full."""
    a = dict(zip(("0", "1", " rows", "9", "2"), (-0.0028505190, -5.8617659, -15.127368, -17.727150, -19.516909)))
    b = dict(zip(a, (-0.0028506380, -5.8617601, -15.127364, -17.727148, -19.516909)))
    assert 1 - sum(math.exp(v) for v in a.values()) < 0 < 1 - sum(math.exp(v) for v in b.values())
    one = TokenLogprobs(("0",), (a["0"],), (tuple(a.items()),))
    other = TokenLogprobs(("0",), (b["0"],), (tuple(b.items()),))
    assert compare_item("t/0", one, other).max_kl < 1e-12
    assert compare_item("t/0", other, one).max_kl < 1e-12
    peaked, spread = (
        TokenLogprobs(("a",), (LN(0.999),), ((("a", LN(0.999)),),)),
        TokenLogprobs(("a",), (LN(0.99),), ((("a", LN(0.99)),),)),
    )
    kl = 0.99 * LN(0.99 / 0.999) + 0.01 * LN(0.01 / 0.001)  # KL(OFF || ON), OFF the reference
    assert compare_item("t/0", peaked, spread).max_kl == pytest.approx(kl)


def test_nothing_past_the_first_parted_token_is_compared():
    off = gen("abcdef", [LN(0.9)] * 6)
    on = gen("abXYZW", [LN(0.9), LN(0.5), LN(0.2), LN(0.01), LN(0.01), LN(0.01)])
    item = compare_item("t/0", on, off)
    assert item.parted_at == 2 and item.compared == 3  # the parting position had the same context
    # position 1's change, and at 2 OFF's token "c" under ON: not in ON's top-2, so at most its 2nd (0.1): >= ln 9
    assert item.max_abs_delta == pytest.approx(LN(0.9 / 0.1))
    # KL at 2 over c, X, z and the rest: OFF's X at its 2nd (0.1), its rest at the floor, then normalized; ON's c at 0.1
    p = [x / (1.1 + REST_FLOOR) for x in (0.9, 0.1, 0.1, REST_FLOOR)]
    q = [0.1, 0.2, 0.1, 0.6]
    assert item.max_kl == pytest.approx(sum(pi * LN(pi / qi) for pi, qi in zip(p, q)))


def test_a_generation_that_stops_early_parts_where_it_stops():
    long, short = gen("abcd", [LN(0.7)] * 4), gen("ab", [LN(0.7)] * 2)
    item = compare_item("t/0", short, long)
    assert item.parted_at == 2 and item.compared == 2 and item.max_abs_delta == 0.0


def test_the_task_verdict_follows_the_worst_item():
    clean = gen("abc", [LN(0.8)] * 3)
    noisy = gen("abc", [LN(0.8) + 5e-5, LN(0.8), LN(0.8)])
    broken = gen("abc", [LN(0.8), LN(0.3), LN(0.8)])
    pairs = [(f"t/{i}", clean, clean) for i in range(10)]
    assert judge_logprobs(pairs, thresholds(), "k").verdict is Verdict.GREEN
    amber = judge_logprobs([*pairs, ("t/10", noisy, clean)], thresholds(), "k")
    assert amber.verdict is Verdict.AMBER and "max|dlp|" in amber.reason
    red = judge_logprobs([*pairs, ("t/10", broken, clean)], thresholds(), "k")
    assert red.verdict is Verdict.RED and red.n == 11 and red.delta.p50 == 0.0
    assert red.delta.max == pytest.approx(LN(0.8 / 0.3))


def test_no_verdict_without_logprobs_on_both_sides_or_without_a_calibration():
    a = gen("ab", [LN(0.5)] * 2)
    none = judge_logprobs([("t/0", a, None), ("t/1", None, a)], thresholds(), "k")
    assert none.verdict is Verdict.NONE and none.n == 0 and none.missing == 2
    uncalibrated = judge_logprobs([("t/0", a, a)], None, "sglang/bfloat16")
    assert uncalibrated.verdict is Verdict.NONE and "sglang/bfloat16" in uncalibrated.reason


def test_openai_completions_and_chat_logprobs_read_alike():
    completions = {"tokens": ["a", "b"], "token_logprobs": [-0.1, -0.2], "top_logprobs": [{"a": -0.1}, {"b": -0.2}]}
    chat = {
        "content": [
            {"token": "a", "logprob": -0.1, "top_logprobs": [{"token": "a", "logprob": -0.1}]},
            {"token": "b", "logprob": -0.2, "top_logprobs": [{"token": "b", "logprob": -0.2}]},
        ]
    }
    assert TokenLogprobs.from_openai(completions) == TokenLogprobs.from_openai(chat)


def test_committed_thresholds_come_from_twenty_clean_seeds_and_rederive_from_their_data():
    data = json.loads(THRESHOLDS_FILE.read_text())
    entry = data["thresholds"]["harness/float32"]
    rows = data["data"]["harness/float32"]
    assert entry["seeds"] >= 20 and len({r["seed"] for r in rows}) == entry["seeds"]
    assert {r["comparison"] for r in rows if r.get("source") == "cpu"} == {"on-vs-off", "cache-off-vs-on"}
    # Every configuration a shipped harness plan serves is calibrated: its clean arms are a source of the data.
    plans = [p for p in sorted((REPO / "suites" / "plans").glob("*.yaml")) if _harness_plan(p)]
    assert {r.get("source") for r in rows} == {"cpu", *(str(p.relative_to(REPO)) for p in plans)}
    assert {k: entry[k] for k in ("amber", "red", "clean")} == derive(rows)  # the data are the thresholds' own
    alarms = leave_one_out(rows)
    assert alarms["amber"] + alarms["red"] <= alarms["seeds"] / 20  # false alarms at most 1 in 20
    t = load_thresholds()["harness/float32"]
    assert 0 < t.amber.max_abs_delta < t.red.max_abs_delta < 0.05  # a 5 % change of one token's probability is RED


def _harness_plan(path: Path) -> bool:
    """Every arm of the plan is served by the harness."""
    plan = plan_from_file(path)
    return all(a.engine == "harness" for a in plan.arms)


class _FakeServer(BaseHTTPRequestHandler):
    """Answers completions; with ``logprobs`` unless ``refuse`` is set on the server (then a 400 naming it)."""

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append(body)  # type: ignore[attr-defined]
        if body.get("logprobs") and self.server.refuse:  # type: ignore[attr-defined]
            self._send(400, {"error": {"message": "logprobs are not supported", "param": "logprobs"}})
            return
        choices = []
        for i, prompt in enumerate(body["prompt"]):
            lp = None
            if body.get("logprobs"):
                lp = {"tokens": [prompt[-1]], "token_logprobs": [-0.5], "top_logprobs": [{prompt[-1]: -0.5}]}
            choices.append({"index": i, "text": prompt[-1], "logprobs": lp, "finish_reason": "length"})
        self._send(200, {"choices": choices})

    def _send(self, status: int, data: dict) -> None:
        raw = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fake_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeServer)
    server.seen, server.refuse = [], False  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def _post(url: str, body: dict) -> dict:
    import urllib.request

    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def test_the_proxy_adds_logprobs_records_them_by_prompt_and_hands_lm_eval_none(fake_server, tmp_path):
    upstream = f"http://127.0.0.1:{fake_server.server_address[1]}"
    with LogprobRecorder(upstream, tmp_path / "r.jsonl", top_k=3) as proxy:
        answer = _post(f"{proxy.url}/v1/completions", {"prompt": ["xa", "yb"], "max_tokens": 4})
    assert fake_server.seen[0]["logprobs"] == 3
    assert [c["logprobs"] for c in answer["choices"]] == [None, None]  # what lm-eval reads without the proxy
    records = load_records(tmp_path / "r.jsonl")
    assert records[prompt_key("yb")] == TokenLogprobs(("b",), (-0.5,), ((("b", -0.5),),))
    assert prompt_key('[{"role": "user", "content": "q"}]') == prompt_key([{"content": "q", "role": "user"}])


def test_a_server_that_refuses_logprobs_is_asked_again_without_and_never_again(fake_server, tmp_path):
    fake_server.refuse = True
    upstream = f"http://127.0.0.1:{fake_server.server_address[1]}"
    with LogprobRecorder(upstream, tmp_path / "r.jsonl") as proxy:
        for _ in range(2):
            answer = _post(f"{proxy.url}/v1/completions", {"prompt": ["xa"], "max_tokens": 4})
            assert answer["choices"][0]["text"] == "a"
    assert [bool(b.get("logprobs")) for b in fake_server.seen] == [True, False, False]
    assert proxy.refused and "logprobs" in proxy.refused and load_records(tmp_path / "r.jsonl") == {}


def test_a_saved_run_keeps_its_logprobs_beside_it(tmp_path: Path):
    lp = gen("ab", [-0.1, -0.2])
    items = [ItemResult("t/0", "p", "g", "r", None, False, lp), ItemResult("t/1", "p1", "g", "r", None, True)]
    run = RunResult("t", "tape", "m", True, None, items, 1.0, RunRecord("on"))
    path = run.save(tmp_path / "runs" / "t.json")
    assert "logprobs" not in path.read_text() and (tmp_path / "runs" / "t.logprobs.jsonl").is_file()
    assert RunResult.load(path).items == items


def _run(arm: str, items: list[ItemResult]) -> RunResult:
    identity = ServedIdentity("harness", "x", "m", flags={"dtype": "float32"})
    return RunResult(
        "gsm_style", arm, "m", True, None, items, 1.0, RunRecord(arm, served_by="harness", identity=identity)
    )


def test_a_comparison_carries_the_axis_judged_by_the_committed_calibration_and_the_report_draws_it():
    clean = gen("abc", [LN(0.8)] * 3)
    broken = gen("abc", [LN(0.8), LN(0.5), LN(0.8)])  # the same text: no answer changes
    off = [ItemResult(f"gsm_style/{i}", f"p{i}", "1", "abc", "1", True, clean) for i in range(4)]
    on = [replace(off[0], logprobs=broken), *off[1:]]
    comparison = compare_runs(_run("on", on), _run("off", off))
    assert comparison.verdict is Verdict.AMBER and not comparison.flips  # accuracy: underpowered, nothing flips
    assert comparison.logprobs is not None and comparison.logprobs.verdict is Verdict.RED
    assert comparison.logprobs.key == "harness/float32" and "harness/float32" in comparison.logprobs.reason
    assert comparison.logprobs.line.startswith("logprobs: RED (N=4")
    html = render_html([comparison], [], summary=summarize([comparison]), provenance={})
    assert 'class="logprob-row" data-suite="gsm_style" data-verdict="RED"' in html
    assert "logprobs <strong>RED</strong>" in html  # the chip beside the accuracy chip
    again = TaskComparison.from_dict(json.loads(json.dumps(comparison.to_dict())))
    assert again.logprobs == comparison.logprobs
