"""The cache-hit protocol every server is held to: answers served from a warm prefix cache equal the same requests
replayed on an empty one, and transformers', and every kind of reuse really was served from the cache.

A prefix-cache bug shows only when a later request reuses what an earlier one left behind, so the protocol makes
later requests do that, the ways real traffic does, in rounds, one per family of prompts, each warmed up and reused before the next begins (``Workload.rounds``: in a
tight pool a round's warm-up evicts the rounds before it, and no reuse request waits in a queue while LRU evicts the
prefix it came for):

1. **warm-up** (concurrent; the cache emptied once, before the first round): one prompt of each shared-prefix group
   (lm-eval's few-shot contexts share their exemplars), the first turn of each conversation, prompts several windows
   long, or prompts one token under one window, of one window and one token over (SGLang's KL protocol: prefixes
   below, at and past the window);
2. **reuse** (concurrent, one client per request), in up to two waves. The first: every warm-up prompt of the round
   again (``repeat``), each conversation's next turn after the model's own first answer, once per follow-up
   (``second-turn``: the prefix runs through generated tokens), each long prompt with a tail (``long``), and the
   second prompt of each group (``branch``: the first request that shares only part of a finished prompt), each
   window-edge prompt with the tail (``edge``). The
   second wave: the rest of each group at once (``shared-prefix``: concurrent requests sharing a cached prefix);
3. **fresh**: each reuse request again, alone, right after ``flush_cache`` (SGLang's way: its KL tests replay after
   ``/flush_cache``), so it is served with nothing cached.

Verdict, per kind of reuse, read from the server's own ``usage.prompt_tokens_details.cached_tokens``: a kind hits on
every request in a roomy pool and on at least half of them (at least one) in a tight one, where a round's own
requests may still evict each other's prefixes; a kind the server does not hit by design is in one table with its reason
(``MISSES_BY_DESIGN``): one it never hits must miss (a hit fails, naming the row to drop), one it may miss is not
counted either way; a request that shares less than one page cannot hit (a cache holds whole pages) and is not
counted. No fresh replay may hit. Every reuse answer and
top-5 logprob must equal the fresh replay's and transformers' within the suite's tolerance, and the continuation's
logprobs the fresh replay's by KL (SGLang's ``kl_test_utils`` protocol, position by position over the top-5 and the
rest of the vocabulary as one bucket, the worst position): to the last bit where the server is deterministic on CPU,
within a measured bound where it is not (``CACHE_KL``). A tight pool must prove
its pressure with the server's own counters, read from ``/metrics`` before the first round and after the last
(``harness.servers.counters.CacheCounters``): full KV evicted, SWA KV evicted, SWA KV tombstoned; a pool that did not
evict, a server that reports no cached tokens, or a flush that leaves hits behind gives no verdict (``NoVerdict``),
never a pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest

from harness.servers.base import ServerKind
from harness.servers.counters import CacheCounters
from harness.servers.lifecycle import ServerProcess
from suites.servers.oracles import Agreement, Reference, Served, agreement, ask, transformers_reference

Kind = Literal["repeat", "second-turn", "long", "edge", "branch", "shared-prefix"]
Pool = Literal["roomy", "tight"]


@dataclass(frozen=True)
class Miss:
    """Why a server does not serve one kind of reuse from its cache; ``always``: it never can (the protocol checks
    every such request misses), else it may miss, depending on arrival order (neither a hit nor a miss is asked).
    ``chunks_hit``: why it can when the prompt was prefilled in chunks (then neither is asked either)."""

    why: str
    always: bool
    chunks_hit: str = ""  # why a prompt prefilled in chunks can be hit at a chunk's end: then it may miss, not must


# (server kind, reuse kind) -> the design that makes that server miss it. Every other pair must hit.
MISSES_BY_DESIGN: dict[tuple[str, Kind], Miss] = {
    ("sglang", "branch"): Miss(
        "docs/FINDINGS.md #10: SGLang frees a published prompt's SWA KV up to its last window, so the first request "
        "sharing only part of it finds no live window at its branching point",
        always=True,
        chunks_hit="SGLang inserts each prefill chunk of an unfinished request with its window live at the chunk's "
        "end (unified_radix_cache.cache_unfinished_req -> free_out_of_window_slots), so a branch past a chunk's end "
        "matches up to it (page 16, chunks of 32: 16 of 31 shared tokens)",
    ),
    ("vllm", "branch"): Miss(
        "docs/FINDINGS.md #10 (upstream #57610): vLLM 0.32 keeps a sliding-window group's blocks cached only where a "
        "later request can resume (its replay boundaries: a prompt's end) and at a shared-prefix junction a prefill "
        "detects, so the first request sharing part of a finished prompt finds no window at its branching point, and "
        "caches one there for the next (measured one request at a time: 0, then 160 and 160 of 180 shared tokens)",
        always=True,
    ),
    ("harness", "branch"): Miss(
        "harness/mem/radix_cache.py rules 6-7: a published prompt keeps live SWA KV only in its last window, unless "
        "its request branched off a tombstoned prefix, which keeps its window live from that branching point until "
        "its checkpoint (the whole prompt, where the branching point was its first token); which warm-up prompt "
        "branched off which depends on arrival order (measured on one server, three runs: 0, 1 and 1 of 2 hit)",
        always=False,
    ),
}


@dataclass(frozen=True)
class KlBound:
    """How close a warm continuation's logprobs must be to the fresh replay's: ``limit`` on the worst position's KL
    (0: the same bits, every logprob); ``why`` the measurement or design that sets it."""

    limit: float
    why: str


# server kind -> its bound. vLLM serves a hit from the very blocks its prefill wrote and its CPU kernels do not
# depend on how much of the prompt was cached: bit-exact, measured (worst |dlogprob| vs fresh 0.0 on every run in
# reports/cache-hits.jsonl). The harness and SGLang prefill only the uncached part, a matmul of another shape: the
# harness's worst KL vs fresh was 1.5e-10 over its four pools (|dlogprob| <= 4.3e-5), SGLang's 1.9e-12 on its tight pool;
# each bound is about 60x the worst measured KL, and far below SGLang's GPU threshold (0.02, where kernels are not
# deterministic). KL is about p * d**2 / 2 for a token of probability p whose logprob moves by d.
CACHE_KL: dict[str, KlBound] = {
    "vllm": KlBound(0.0, "bit-exact: vLLM's warm answers equal the fresh replays' to the last bit on CPU (measured)"),
    "harness": KlBound(1e-8, "the uncached suffix's prefill is another matmul shape (KL <= 1.5e-10 measured)"),
    "sglang": KlBound(1e-10, "the uncached suffix's prefill is another matmul shape (KL <= 1.9e-12 measured)"),
}


class NoVerdict(Exception):
    """The protocol could not judge the cache (the server says nothing about it, or cannot empty it); one line."""


@dataclass(frozen=True)
class Workload:
    """The texts requests are built from; each server's suite picks texts its checkpoint's tokenizer knows."""

    groups: tuple[tuple[str, ...], ...]  # prompts sharing a long prefix, per group (e.g. one lm-eval task's contexts)
    openers: tuple[str, ...]  # each conversation's first turn
    follow_ups: tuple[str, ...]  # next turns; every conversation branches into each of them
    long: tuple[str, ...]  # prompts several windows long
    tail: str  # what a long prompt's reuse appends
    edges: tuple[str, ...] = ()  # prompts of one window's length, one token under and one over (``with_edges``)

    def warm_up(self) -> list[str]:
        return [group[0] for group in self.groups] + list(self.openers) + list(self.long) + list(self.edges)

    def with_edges(self, ckpt: Path, page: int = 1) -> Workload:
        """This workload with three window-edge prompts for ``ckpt``: runs of words of the last long prompt (from a
        quarter, half and three quarters in, so no edge prompt is a prefix of another request) whose tokenizations,
        BOS included, are one token under the checkpoint's sliding window, the window, and one token over. Where even
        the longest is under ``page`` (the server's page or block size), no edge prompt is sent: none could hit, and
        three more warm-up prompts would only add to a tight pool's pressure."""
        import json

        from tokenizers import Tokenizer

        window = int(json.loads((ckpt / "config.json").read_text())["sliding_window"])
        if window + 1 < page:
            return self
        tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
        source = self.long[-1].split(" ")
        edges = []
        for i, target in enumerate((window - 1, window, window + 1)):
            edges.append(_exact_prefix(source, len(source) * (i + 1) // 4, target, lambda t: len(tok.encode(t).ids)))
        return dataclasses.replace(self, edges=tuple(edges))

    def rounds(self) -> list[Workload]:
        """The workload in rounds, one per family of prompts (the shared-prefix groups, the conversations, the long
        prompts, the window-edge prompts), each warmed up and reused before the next begins. In a tight pool a
        round's warm-up evicts the rounds before it, so the pressure is the same, but no reuse request waits behind
        the others while LRU evicts the prefix it came for: with every kind in one wave (max-running 4), which kinds
        lost their warm-up depended on arrival order (the harness server, cores shared: 1 of 3 edge requests hit,
        then 3 of 9 repeats with the kinds interleaved)."""
        none = dict(groups=(), openers=(), long=(), edges=())
        parts = (
            dataclasses.replace(self, **{**none, "groups": self.groups}),
            dataclasses.replace(self, **{**none, "openers": self.openers}),
            dataclasses.replace(self, **{**none, "long": self.long}),
            dataclasses.replace(self, **{**none, "edges": self.edges}),
        )
        return [part for part in parts if part.warm_up()]

    def reuse_waves(self, warm_answers: Sequence[str]) -> list[list[Reuse]]:
        """One round's reuse requests in their two waves, given its warm-up's answers (in ``warm_up`` order)."""
        warm = self.warm_up()
        answer = dict(zip(warm, warm_answers))
        first = [Reuse("repeat", p, p) for p in warm]
        for o in self.openers:
            turn = f"{o.rstrip()} {answer[o].strip()}"  # the first turn as the server holds it: prompt and answer
            first += [Reuse("second-turn", turn + f, turn) for f in self.follow_ups]
        first += [Reuse("long", p + self.tail, p) for p in self.long]
        first += [Reuse("edge", p + self.tail, p) for p in self.edges]
        first += [Reuse("branch", group[1], group[0]) for group in self.groups]
        second = [Reuse("shared-prefix", p, group[0]) for group in self.groups for p in group[2:]]
        return [wave for wave in (first, second) if wave]

    def reuse(self, warm_answers: Sequence[str]) -> list[Reuse]:
        """Every reuse request in the order the protocol sends them, round by round and wave by wave, given the
        warm-up's answers (in ``warm_up`` order)."""
        answer = dict(zip(self.warm_up(), warm_answers))
        return [
            item
            for part in self.rounds()
            for wave in part.reuse_waves([answer[p] for p in part.warm_up()])
            for item in wave
        ]


@dataclass(frozen=True)
class Reuse:
    """One reuse request: its kind, its prompt, and the earlier text whose cached KV it can reuse."""

    kind: Kind
    prompt: str
    shares: str


@dataclass(frozen=True)
class Expected:
    """What a correct server gives on the reuse requests: transformers' answers, and per request the tokens it shares
    with the text it reuses (the longest common prefix of the two tokenizations), which a hit must half cover."""

    prompts: list[str]
    reference: Reference
    shared_tokens: list[int]


@dataclass(frozen=True)
class CacheHitRun:
    """What the server answered: the reuse requests served warm and each replayed fresh."""

    kinds: list[Kind]
    prompts: list[str]
    warm: list[Served]
    fresh: list[Served]
    pressure: CacheCounters | None  # the server's cache counters over the warm-up and reuse waves (None: no /metrics)


@dataclass(frozen=True)
class CacheHitReport:
    """The protocol's numbers for one server configuration (what a closing note quotes)."""

    requests: int
    hits: dict[str, tuple[int, int]]  # kind -> (requests that hit, requests)
    cached_tokens: int
    prompt_tokens: int
    vs_fresh: Agreement
    vs_transformers: Agreement
    pool: Pool
    pressure: CacheCounters | None
    kl_vs_fresh: dict[str, float]  # kind -> the worst position's KL of a warm continuation against its fresh replay
    bit_exact: tuple[int, int]  # (requests whose warm logprobs equal the fresh replay's to the last bit, requests)

    def record(self, name: str) -> str:
        """The report's line, printed and appended to ``reports/cache-hits.jsonl`` (what each configuration's
        cache did, kept across sessions for closing notes and comparisons)."""
        import json
        import time

        from harness.reuse import code_fingerprint
        from harness.paths import REPO

        line = self.line(name)
        print(line)
        out = REPO / "reports" / "cache-hits.jsonl"
        out.parent.mkdir(exist_ok=True)
        entry = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "commit": code_fingerprint()[:12],
            "name": name,
            "hits": self.hits,
            "cached_tokens": self.cached_tokens,
            "prompt_tokens": self.prompt_tokens,
            "pool": self.pool,
            "pressure": dataclasses.asdict(self.pressure) if self.pressure else None,
            "worst_vs_fresh": self.vs_fresh.worst,
            "worst_vs_transformers": self.vs_transformers.worst,
            "kl_vs_fresh": self.kl_vs_fresh,
            "bit_exact": self.bit_exact,
        }
        with out.open("a") as f:
            f.write(json.dumps(entry) + "\n")
        return line

    def line(self, name: str) -> str:
        kinds = ", ".join(f"{k} {h}/{n}" for k, (h, n) in self.hits.items())
        p = self.pressure
        evicted = (
            f"; evicted while requests ran (server's counters): full {p.evicted}, SWA {p.swa_evicted}, "
            f"tombstoned {p.tombstoned}"
            if p
            else ""
        )
        return (
            f"{name} ({self.pool}): {self.requests} reuse requests, hits {kinds}; {self.cached_tokens}/"
            f"{self.prompt_tokens} prompt tokens from the cache{evicted}; worst |dlogprob| vs fresh "
            f"{self.vs_fresh.worst:.3g}, vs transformers {self.vs_transformers.worst:.3g}; worst KL vs fresh "
            f"{max(self.kl_vs_fresh.values(), default=0.0):.3g}, {self.bit_exact[0]}/{self.bit_exact[1]} bit-exact"
        )


def serve_concurrently(
    server: ServerProcess, served: str, prompts: Sequence[str], new_tokens: int, extra: Mapping[str, Any] | None
) -> list[Served]:
    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(lambda p: ask(server, served, p, new_tokens, extra=extra), prompts))


def run_protocol(
    kind: ServerKind,
    server: ServerProcess,
    served: str,
    workload: Workload,
    new_tokens: int,
    extra: Mapping[str, Any] | None = None,
) -> CacheHitRun:
    """Warm-up, reuse, fresh replays (module docstring). CacheFlushRefused propagates: one line, no verdict."""
    kind.flush_cache(server.base_url)
    before = kind.cache_counters(server.base_url)
    asks: list[Reuse] = []
    warm: list[Served] = []
    for part in workload.rounds():
        warm_up = serve_concurrently(server, served, part.warm_up(), new_tokens, extra)
        for wave in part.reuse_waves([s.text for s in warm_up]):
            asks += wave
            warm += serve_concurrently(server, served, [r.prompt for r in wave], new_tokens, extra)
    prompts = [r.prompt for r in asks]
    after = kind.cache_counters(server.base_url)
    fresh = []
    for prompt in prompts:
        kind.flush_cache(server.base_url)
        fresh.append(ask(server, served, prompt, new_tokens, extra=extra))
    pressure = after - before if after is not None and before is not None else None
    return CacheHitRun([r.kind for r in asks], prompts, warm, fresh, pressure)


def expected_hits(requests: int, pool: Pool) -> int:
    """The fewest requests of one reuse kind that must hit: all in a roomy pool; in a tight one at least half and at
    least one, since LRU may evict a prefix before a late arrival reuses it (measured on the harness server with the
    cores shared: 5 of 6 repeats), while a cache that stopped matching that kind hits none."""
    return requests if pool == "roomy" else max(1, (requests + 1) // 2)


def judge(
    run: CacheHitRun, expected: Expected, tol: float, server: str, pool: Pool, page: int = 1, chunked: bool = False
) -> CacheHitReport:
    """The verdict (module docstring): NoVerdict when the server cannot be judged, AssertionError when it is wrong.
    ``server``: the server kind's name (the key of ``MISSES_BY_DESIGN`` and ``CACHE_KL``). A request *hit* when the
    cache served at least half of the tokens it shares with what it reuses (a match of its first few tokens reuses
    nothing); one that shares less than ``page`` tokens (the server's page or block size) is not counted.
    ``chunked``: the server prefills long prompts in chunks (a ``Miss`` with ``chunks_hit`` may then be hit)."""
    engine = f"the {server} server"
    if (silent := sum(s.cached_tokens is None for s in run.warm + run.fresh)) > 0:
        raise NoVerdict(
            f"{engine} reported no cached prompt tokens (usage.prompt_tokens_details.cached_tokens) on {silent} of "
            f"{2 * len(run.warm)} requests: the cache-hit check has no verdict"
        )
    if leftover := [(i, s.cached_tokens) for i, s in enumerate(run.fresh) if s.cached_tokens]:
        raise NoVerdict(
            f"{engine} served {len(leftover)} replays after a flush from its cache (request, cached tokens: "
            f"{leftover[:3]}): its flush did not empty the cache, so no replay was fresh"
        )
    if pool == "tight":
        if run.pressure is None:
            raise NoVerdict(f"{engine} serves no cache counters at /metrics: the tight pool cannot prove its pressure")
        if missing := run.pressure.pressure_missing():
            raise NoVerdict(
                f"{engine}'s tight pool did not come under pressure while requests ran (its own counters: "
                f"{', '.join(missing)}): a pass would prove nothing about eviction"
            )
    if silent := sum(s.logprobs is None for s in run.warm + run.fresh):
        raise NoVerdict(f"{engine} returned no per-token logprobs on {silent} requests: the KL check has no verdict")
    hits: dict[str, tuple[int, int]] = {}
    for kind in dict.fromkeys(run.kinds):
        mine = [i for i, k in enumerate(run.kinds) if k == kind and expected.shared_tokens[i] >= page]
        if not mine:  # every request of this kind shares less than a page: it cannot hit, nothing to count
            hits[kind] = (0, 0)
            continue
        cached = [f"{run.warm[i].cached_tokens}/{expected.shared_tokens[i]}" for i in mine]
        hit = sum(2 * (run.warm[i].cached_tokens or 0) >= expected.shared_tokens[i] > 0 for i in mine)
        hits[kind] = (hit, len(mine))
        if (miss := MISSES_BY_DESIGN.get((server, kind))) is not None:
            assert hit == 0 or not miss.always or (chunked and miss.chunks_hit), (
                f"{engine} served {hit} of {len(mine)} {kind} requests from its cache (cached/shared tokens "
                f"{cached}), which MISSES_BY_DESIGN says it never does ({miss.why}): drop that row"
            )
            continue
        assert hit >= expected_hits(len(mine), pool), (
            f"{engine}: {hit} of {len(mine)} {kind} requests hit its cache in a {pool} pool (cached/shared tokens "
            f"{cached}); at least {expected_hits(len(mine), pool)} must, or their answers prove nothing"
        )
    fresh = Reference([s.text for s in run.fresh], [s.tops for s in run.fresh])
    vs_fresh = agreement([(s.text, s.tops) for s in run.warm], fresh)
    vs_transformers = agreement([(s.text, s.tops) for s in run.warm], expected.reference)
    for against, found in (("replayed on an empty cache", vs_fresh), ("transformers", vs_transformers)):
        if found.wrong:
            i, got, want = found.wrong[0]
            raise AssertionError(
                f"{len(found.wrong)}/{found.n} {engine} answers from a warm cache differ from the same requests "
                f"{against}, e.g. #{i} ({run.kinds[i]}, {run.warm[i].cached_tokens} of {run.warm[i].prompt_tokens} "
                f"prompt tokens cached): {got!r} vs {want!r}"
            )
        assert found.worst <= tol, (
            f"{engine}'s top logprobs from a warm cache differ from the same requests {against} by "
            f"{found.worst:.3g} nats (> {tol}) at request #{found.where[0]} ({run.kinds[found.where[0]]}), "
            f"token {found.where[1]}"
        )
    kl_vs_fresh, bit_exact = hold_kl(run, server)
    return CacheHitReport(
        len(run.warm),
        hits,
        sum(s.cached_tokens or 0 for s in run.warm),
        sum(s.prompt_tokens for s in run.warm),
        vs_fresh,
        vs_transformers,
        pool,
        run.pressure,
        kl_vs_fresh,
        (bit_exact, len(run.warm)),
    )


def hold_kl(run: CacheHitRun, server: str) -> tuple[dict[str, float], int]:
    """Each warm continuation's logprobs against its fresh replay's (``compare_item``: chosen-token |dlogprob| and
    KL over the top-5 and the rest, on the positions both saw the same context), held to the server's ``CACHE_KL``
    bound; returns the worst KL per kind and how many requests were bit-exact. A server with no row must be
    bit-exact."""
    from harness.evals.logprobs import compare_item

    bound = CACHE_KL.get(server, KlBound(0.0, "no measured bound: bit-exact asked"))
    worst: dict[str, float] = {}
    exact = 0
    for i, (kind, warm, fresh) in enumerate(zip(run.kinds, run.warm, run.fresh)):
        assert warm.logprobs is not None and fresh.logprobs is not None  # judge's NoVerdict ruled that out
        diff = compare_item(str(i), warm.logprobs, fresh.logprobs)
        same = warm.logprobs == fresh.logprobs
        exact += same
        worst[kind] = max(worst.get(kind, 0.0), diff.max_kl)
        where = f"request #{i} ({kind}, {warm.cached_tokens} of {warm.prompt_tokens} prompt tokens cached)"
        if bound.limit == 0.0:
            assert same, (
                f"the {server} server's logprobs from a warm cache differ from the fresh replay's at {where}: KL "
                f"{diff.max_kl:.3g}, |dlogprob| {diff.max_abs_delta:.3g}, first parting token {diff.parted_at}; "
                f"CACHE_KL asks the same bits ({bound.why})"
            )
        assert diff.max_kl <= bound.limit, (
            f"the {server} server's continuation from a warm cache is {diff.max_kl:.3g} nats of KL from the fresh "
            f"replay's (> {bound.limit:g}: {bound.why}) at {where}"
        )
    return worst, exact


def transformers_expectation(ckpt: Path, workload: Workload, new_tokens: int) -> Expected:
    """The reuse prompts, built from transformers' warm-up answers (a server's must equal them), transformers'
    answers to them, and the tokens each shares with what it reuses (the checkpoint's own tokenizer)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    warm_up = transformers_reference(ckpt, workload.warm_up(), new_tokens)
    reuse = workload.reuse(warm_up.answers)
    prompts = [r.prompt for r in reuse]

    def common(a: list[int], b: list[int]) -> int:
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))

    shared = [common(tok.encode(r.prompt).ids, tok.encode(r.shares).ids) for r in reuse]
    return Expected(prompts, transformers_reference(ckpt, prompts, new_tokens), shared)


def hold(
    kind: ServerKind,
    server: ServerProcess,
    served: str,
    workload: Workload,
    new_tokens: int,
    expected: Expected,
    tol: float,
    name: str,
    pool: Pool,
    extra: Mapping[str, Any] | None = None,
    page: int = 1,
    chunked: bool = False,
) -> CacheHitReport:
    """A server's test: the protocol run and judged against ``transformers_expectation``; no verdict fails the test
    in one line; the report recorded under ``name``. ``page``: the server's page (block) size; ``chunked``: it
    prefills long prompts in chunks."""
    run = run_protocol(kind, server, served, workload, new_tokens, extra)
    assert run.prompts == expected.prompts, (
        f"the {kind.name} server's warm-up answers differ from transformers', so do its reuse prompts"
    )
    try:
        report = judge(run, expected, tol, kind.name, pool, page, chunked)
    except NoVerdict as exc:
        pytest.fail(f"NO VERDICT: {exc}", pytrace=False)
    report.record(name)
    return report


def _exact_prefix(words: Sequence[str], start: int, tokens: int, count: Callable[[str], int]) -> str:
    """The first run of ``words`` from ``start`` on (start moving a word at a time) whose text is exactly ``tokens``
    tokens long by ``count``; a word-piece tokenizer may end no word there, the next start then may."""
    for first in range(start, len(words)):
        for n in range(1, len(words) - first + 1):
            text = " ".join(words[first : first + n])
            if (length := count(text)) == tokens:
                return text
            if length > tokens:
                break
    raise ValueError(f"no run of words from word {start} on is {tokens} tokens long")


def page_of(flags: Sequence[str], flag: str = "--page-size") -> int:
    """The page (block) size a server's flags ask for; 1 where they do not say."""
    flags = list(flags)
    return int(flags[flags.index(flag) + 1]) if flag in flags else 1


def hold_pressure(kind: ServerKind, server: ServerProcess) -> CacheCounters:
    """A tight pool's proof, for tests outside the protocol: the server's own counters since it started say its cache
    evicted full KV and SWA KV and tombstoned some; otherwise the test has no verdict (one line), never a pass."""
    counters = kind.cache_counters(server.base_url)
    if counters is None or (missing := counters.pressure_missing()):
        why = "it serves no cache counters" if counters is None else ", ".join(missing)
        pytest.fail(
            f"NO VERDICT: the {kind.name} server's tight pool did not come under pressure ({why})", pytrace=False
        )
    return counters


def word_workload(words: Sequence[str], window: int) -> Workload:
    """For a word-level tokenizer (one token per word): groups sharing a 5-window prefix, conversations whose
    openers are 4 windows, long prompts of 10 windows; deterministic, no two prompts alike."""

    def text(start: int, n: int, stride: int) -> str:
        return " ".join(words[(start + k * stride) % len(words)] for k in range(n))

    groups = tuple(
        tuple(f"{text(g * 7, 5 * window, 3)} {text(100 + g * 31 + i * 13, 8, 5)}" for i in range(4)) for g in range(2)
    )
    return Workload(
        groups=groups,
        openers=tuple(text(50 + i * 17, 4 * window, 7) for i in range(2)),
        follow_ups=tuple(" " + text(200 + i * 11, window, 3) for i in range(2)),
        long=tuple(text(300 + i * 23, 10 * window, 11) for i in range(2)),
        tail=" " + text(400, window, 2),
    )


def lm_eval_workload(per_group: int = 4) -> Workload:
    """For the shipped checkpoints' tokenizer: lm-eval's few-shot contexts of the first ``per_group`` GSM-style and
    AIME-style items (one shared exemplar prefix per task, 13-15 windows of 16), two GSM questions asked with no
    exemplars as conversations, and two contexts with other exemplars (rotated) as the long prompts."""
    from fixtures.data.jsonl import read_jsonl
    from fixtures.data.problem import AIME_TASK, GSM_TASK
    from fixtures.data.prompts import build_fewshot_prompt, select_fewshot, spec

    def contexts(task: str, items: range, rotate: bool = False) -> tuple[str, ...]:
        s = spec(task)
        pool, docs = read_jsonl(s.fewshot_path), read_jsonl(s.test_path)
        return tuple(
            build_fewshot_prompt(task, docs[i], select_fewshot(pool, s.num_fewshot, index=i, rotate=rotate))
            for i in items
        )

    gsm = spec(GSM_TASK)
    docs = read_jsonl(gsm.test_path)
    return Workload(
        groups=(contexts(GSM_TASK, range(per_group)), contexts(AIME_TASK, range(per_group))),
        openers=tuple(build_fewshot_prompt(GSM_TASK, docs[i], []) for i in (per_group, per_group + 1)),
        follow_ups=("\nQuestion: What is 3 plus 4?\nAnswer:", "\nQuestion: How many days are in two weeks?\nAnswer:"),
        long=contexts(GSM_TASK, range(per_group + 2, per_group + 4), rotate=True),
        tail="\nQuestion: What is half of 10?\nAnswer:",
    )
