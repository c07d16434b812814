"""The cache-hit protocol's numbers per server and pool, as the server suites recorded them.

    python -m bench.cache_hits [--since 2026-12-05T00:00:00]

Every run of ``suites/servers/cache_hits.py:hold`` (the harness, SGLang and vLLM server suites) appends its line to
``reports/cache-hits.jsonl``: hits per reuse kind, prompt tokens from the cache, what the server's own counters say
its cache evicted while the requests ran, the worst logprob differences. This renders the latest line of each
configuration (since ``--since``) into docs/BENCHMARKS.md; no number is typed by hand.
"""

from __future__ import annotations

import argparse
import json

from bench.common import markdown_table, write_section
from harness.paths import REPO

KINDS = ("repeat", "second-turn", "long", "edge", "branch", "shared-prefix")
JSONL = REPO / "reports" / "cache-hits.jsonl"


def rows(since: str) -> list[list[str]]:
    latest: dict[str, dict] = {}
    for line in JSONL.read_text().splitlines():
        entry = json.loads(line)
        if entry["at"] >= since and "pool" in entry:
            latest[entry["name"]] = entry
    out = []
    for name, e in sorted(latest.items(), key=lambda kv: kv[1]["at"]):
        hits = ", ".join(f"{e['hits'][k][0]}/{e['hits'][k][1]}" if k in e["hits"] else "-" for k in KINDS)
        p = e.get("pressure") or {}
        evicted = ", ".join(
            f"{p.get(k) if p.get(k) is not None else '?'}" for k in ("evicted", "swa_evicted", "tombstoned")
        )
        out.append(
            [
                name,
                e.get("commit", "?"),
                e["pool"],
                hits,
                f"{e['cached_tokens']:,} / {e['prompt_tokens']:,}",
                evicted if p else "(no counters)",
                f"{e['worst_vs_fresh']:.2g}",
                f"{e['worst_vs_transformers']:.2g}",
                f"{max(e['kl_vs_fresh'].values(), default=0.0):.2g}" if "kl_vs_fresh" in e else "-",
                "{}/{}".format(*e["bit_exact"]) if "bit_exact" in e else "-",
            ]
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache_hits", description=__doc__.split("\n\n")[0])
    parser.add_argument("--since", default="", help="only runs at or after this time (ISO, as the JSONL writes it)")
    args = parser.parse_args(argv)
    table = rows(args.since)
    if not table:
        print(f"no protocol runs in {JSONL} since {args.since or 'the start'}: run the server suites first")
        return 2
    header = (
        "configuration",
        "commit",
        "pool",
        "hits (" + ", ".join(KINDS) + ")",
        "prompt tokens from the cache",
        "evicted while requests ran: full, SWA, tombstoned (server's counters)",
        "Δ vs fresh",
        "Δ vs transformers",
        "KL vs fresh",
        "bit-exact vs fresh",
    )
    body = (
        "The protocol runs in rounds, one per family of prompts, each warmed up and reused before the next (a tight "
        "pool's later rounds evict the earlier ones). A request *hits* when the cache served at least half of the "
        "tokens it shares with what it reuses. A roomy pool must hit every request of a kind, a tight one half (at "
        "least one), and must show all three eviction counts above 0; the branch (the first request sharing part of a "
        "finished prompt) misses by design on every server, but for SGLang prefilling in chunks, which keeps a live "
        "window at each chunk's end (`MISSES_BY_DESIGN` in `suites/servers/cache_hits.py`). Δ: the worst |Δlogprob| over every generated token's "
        "top 5. KL: the worst position's KL of a warm continuation against its fresh replay (top 5 and the rest; "
        "`CACHE_KL`: vLLM must be bit-exact, the harness <= 1e-8, SGLang <= 1e-10). Edge: prompts one token under "
        "one window, of one window and one over, then extended; a request sharing less than a page is not counted "
        "(vLLM's 32-token blocks: none).\n\n" + markdown_table(header, table)
    )
    command = "the server suites (nox -s tests, sglang_server, vllm), then python -m bench.cache_hits" + (
        f" --since {args.since}" if args.since else ""
    )
    write_section("cache-hits", "The cache-hit protocol per server and pool (issue 53)", command, body)
    print(markdown_table(header, table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
