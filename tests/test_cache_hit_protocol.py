"""The cache-hit protocol's verdict (``suites/servers/cache_hits.py:judge``) on made-up server answers: what a real
server run cannot show on demand (a pool that did not evict, a kind that stopped hitting, a match of the first few
tokens only, a by-design miss that started hitting) must each end the run as said, never as a pass."""

from __future__ import annotations

import dataclasses

import pytest

from harness.evals.results import TokenLogprobs
from harness.servers.counters import CacheCounters
from suites.servers.cache_hits import CacheHitRun, Expected, Kind, NoVerdict, judge
from suites.servers.oracles import Reference, Served

KINDS: list[Kind] = ["repeat", "repeat", "second-turn", "long", "branch", "shared-prefix", "shared-prefix"]
SHARED = [40, 40, 30, 60, 35, 35, 35]
TOPS = [[-0.1, -2.0, -3.0, -4.0, -5.0]]  # one generated token, its top-5 logprobs
PRESSED = CacheCounters(query_tokens=500, hit_tokens=300, evicted=64, swa_evicted=32, tombstoned=8)


def token_logprobs(text: str, shift: float = 0.0) -> TokenLogprobs:
    """One generated token with its top-5 (``shift`` added to the chosen token's logprob, as a wrong KV would)."""
    top = ((text, TOPS[0][0] + shift), *((f" {k}", v) for k, v in zip("abcd", TOPS[0][1:])))
    return TokenLogprobs((text,), (TOPS[0][0] + shift,), (top,))


def served(cached: int, text: str = " 7", shift: float = 0.0) -> Served:
    return Served(text, TOPS, 50, cached, token_logprobs(text, shift))


def run(
    cached: list[int],
    pressure: CacheCounters | None = PRESSED,
    texts: list[str] | None = None,
    shifts: list[float] | None = None,
) -> CacheHitRun:
    texts = texts or [" 7"] * len(cached)
    warm = [served(c, t, d) for c, t, d in zip(cached, texts, shifts or [0.0] * len(cached))]
    fresh = [served(0) for _ in cached]
    return CacheHitRun(list(KINDS), [f"p{i}" for i in range(len(KINDS))], warm, fresh, pressure)


EXPECTED = Expected([f"p{i}" for i in range(len(KINDS))], Reference([" 7"] * len(KINDS), [TOPS] * len(KINDS)), SHARED)
ALL_HIT = [39, 39, 29, 60, 0, 32, 32]  # every kind but the branch, which SGLang never serves (FINDINGS #10)


def test_a_server_that_hits_every_kind_passes_and_says_how_much() -> None:
    report = judge(run(ALL_HIT), EXPECTED, 1e-4, "sglang", "tight")
    assert report.hits == {"repeat": (2, 2), "second-turn": (1, 1), "long": (1, 1), "branch": (0, 1)} | {
        "shared-prefix": (2, 2)
    }
    assert report.pressure == PRESSED and "tombstoned 8" in report.line("x")


@pytest.mark.parametrize("kind", ["second-turn", "long", "shared-prefix"])
def test_a_kind_that_never_hits_fails_naming_it_whatever_the_others_did(kind: str) -> None:
    cached = [0 if k == kind else c for k, c in zip(KINDS, ALL_HIT)]
    with pytest.raises(AssertionError, match=f"0 of \\d {kind} requests hit its cache in a roomy pool"):
        judge(run(cached), EXPECTED, 1e-4, "sglang", "roomy")


def test_a_match_of_the_first_tokens_is_not_a_hit() -> None:
    cached = [c if k != "long" else 4 for k, c in zip(KINDS, ALL_HIT)]  # 4 of the 60 tokens it shares
    with pytest.raises(AssertionError, match="0 of 1 long requests hit .*'4/60'"):
        judge(run(cached), EXPECTED, 1e-4, "sglang", "roomy")


def test_a_tight_pool_hits_half_a_kind_at_least() -> None:
    one_repeat = [39, 0, *ALL_HIT[2:]]
    assert judge(run(one_repeat), EXPECTED, 1e-4, "sglang", "tight").hits["repeat"] == (1, 2)
    with pytest.raises(AssertionError, match="1 of 2 repeat requests hit its cache in a roomy pool"):
        judge(run(one_repeat), EXPECTED, 1e-4, "sglang", "roomy")


@pytest.mark.parametrize("field", ["evicted", "swa_evicted", "tombstoned"])
def test_a_tight_pool_that_did_not_evict_is_no_verdict(field: str) -> None:
    calm = dataclasses.replace(PRESSED, **{field: 0})
    with pytest.raises(NoVerdict, match=f"did not come under pressure .*{field} 0"):
        judge(run(ALL_HIT, calm), EXPECTED, 1e-4, "sglang", "tight")
    with pytest.raises(NoVerdict, match="serves no cache counters"):
        judge(run(ALL_HIT, None), EXPECTED, 1e-4, "sglang", "tight")


def test_a_miss_by_design_that_starts_hitting_fails_naming_the_row() -> None:
    branch_hits = [c if k != "branch" else 35 for k, c in zip(KINDS, ALL_HIT)]
    with pytest.raises(AssertionError, match="MISSES_BY_DESIGN says it never does .*FINDINGS.md #10"):
        judge(run(branch_hits), EXPECTED, 1e-4, "sglang", "roomy")
    assert judge(run(branch_hits), EXPECTED, 1e-4, "harness", "roomy").hits["branch"] == (1, 1)  # may miss, or not
    # prefilled in chunks, SGLang keeps a live window at each chunk's end: a branch past one may hit there
    assert judge(run(branch_hits), EXPECTED, 1e-4, "sglang", "roomy", chunked=True).hits["branch"] == (1, 1)
    with pytest.raises(AssertionError, match="0 of 1 branch requests hit"):  # a server with no such row must hit
        judge(run(ALL_HIT), EXPECTED, 1e-4, "external", "roomy")


def test_a_warm_answer_that_differs_from_the_fresh_replay_fails_naming_the_request() -> None:
    texts = [" 7"] * 5 + [" 8", " 7"]
    with pytest.raises(AssertionError, match=r"#5 \(shared-prefix, 32 of 50 prompt tokens cached\): ' 8' vs ' 7'"):
        judge(run(ALL_HIT, texts=texts), EXPECTED, 1e-4, "sglang", "roomy")


def test_the_continuation_is_held_to_the_fresh_replay_by_kl_bit_exact_where_the_server_is_deterministic() -> None:
    report = judge(run(ALL_HIT), EXPECTED, 1e-4, "vllm", "tight")
    assert report.bit_exact == (7, 7) and max(report.kl_vs_fresh.values()) == 0.0
    one_bit = [0.0] * 5 + [2**-30, 0.0]  # far inside the |dlogprob| tolerance: only the bits differ
    with pytest.raises(AssertionError, match=r"vllm server's logprobs .* differ .* #5 \(shared-prefix.*same bits"):
        judge(run(ALL_HIT, shifts=one_bit), EXPECTED, 1e-4, "vllm", "tight")
    assert judge(run(ALL_HIT, shifts=one_bit), EXPECTED, 1e-4, "sglang", "tight").bit_exact == (6, 7)


def test_a_continuation_off_its_fresh_replay_by_more_than_the_servers_kl_bound_fails_naming_the_request() -> None:
    off = [0.0, 0.0, 0.0, -0.05, 0.0, 0.0, 0.0]  # the chosen token's probability 5 % lower on the long reuse
    with pytest.raises(AssertionError, match=r"nats of KL from the fresh replay's .* #3 \(long, 60 of 50"):
        judge(run(ALL_HIT, shifts=off), EXPECTED, 1.0, "harness", "tight")  # |dlogprob| alone would pass at 1.0


def test_no_per_token_logprobs_is_no_verdict() -> None:
    silent = run(ALL_HIT)
    silent.warm[0] = dataclasses.replace(silent.warm[0], logprobs=None)
    with pytest.raises(NoVerdict, match="no per-token logprobs on 1 requests"):
        judge(silent, EXPECTED, 1e-4, "sglang", "tight")


def test_a_request_sharing_less_than_a_page_is_not_counted() -> None:
    short = dataclasses.replace(EXPECTED, shared_tokens=[40, 40, 30, 12, 35, 35, 35])  # the long reuse: 12 tokens
    cached = [c if k != "long" else 0 for k, c in zip(KINDS, ALL_HIT)]
    assert judge(run(cached), short, 1e-4, "sglang", "roomy", page=16).hits["long"] == (0, 0)
    with pytest.raises(AssertionError, match="0 of 1 long requests hit"):
        judge(run(cached), short, 1e-4, "sglang", "roomy", page=1)


def test_window_edge_prompts_are_one_window_and_a_token_either_side_and_none_where_a_page_is_longer() -> None:
    from tokenizers import Tokenizer

    from suites.conftest import TRAINED_CHECKPOINTS
    from suites.servers.cache_hits import lm_eval_workload

    ckpt = TRAINED_CHECKPOINTS["gemma2-tiny-swa"]  # window 16
    tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    plain = lm_eval_workload()
    edged = plain.with_edges(ckpt)
    assert [len(tok.encode(p).ids) for p in edged.edges] == [15, 16, 17]  # BOS included
    assert edged.warm_up()[-3:] == list(edged.edges) and plain.with_edges(ckpt, page=32) == plain
    assert [r.kind for r in edged.reuse(["x"] * len(edged.warm_up()))].count("edge") == 3
