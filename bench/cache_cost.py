"""What the prefix cache costs a decode run, function by function (issue 58).

The tape engine of ``bench.bench_engine`` (same checkpoint and limits) with the prefix cache on and off, runs
interleaved: each run decodes ``--new-tokens`` for a batch of prompts that the cache has served before (with the cache
on, the tree holds the previous run's sequences, so the pool fills and the tree evicts mid-run, as in the engine
bench). The host functions that differ between the two are timed on the thread's CPU clock around every call, summed
per run with decode isolated (the run of new tokens less the run of one, ``t(new) - t(1)``, as the engine bench
isolates it), and their medians compared: on minus off is what the cache costs each part of a run. The decode time of
the run as a whole is reported beside them. The timers wrap class
attributes for the length of the bench; each call pays two clock reads and a dict update, so a row of a function
called often (the lock floors: some 480 calls a run) carries that cost too.

    python -m bench.cache_cost [--batch 32] [--runs 8] [--write]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from bench.bench_engine import default_checkpoint, prompts_for
from bench.common import markdown_table, write_section
from harness.engine import Engine, EngineConfig, SamplingParams
from harness.engine.model_runner import ModelRunner
from harness.engine.scheduler import Scheduler
from harness.graph.runner import GraphRunner
from harness.mem.radix_cache import RadixCache


@dataclass(frozen=True)
class Timed:
    label: str
    owner: type
    attr: str


# Nested rows are part of the row above them (an eviction runs inside ``_make_room``, the tree's slide inside the
# scheduler's).
TIMED = (
    Timed("engine step (everything below, and sampling)", Engine, "step"),
    Timed("schedule (admission: the tree's match at a run's start)", Scheduler, "schedule"),
    Timed("make room: evictions and their ledger", Scheduler, "_make_room"),
    Timed("  of which the tree's evict", RadixCache, "evict"),
    Timed("  of which tree_slots (the ledger's reads)", RadixCache, "tree_slots"),
    Timed("window slide (every request, one call a step)", Scheduler, "_slide_windows"),
    Timed("  of which the tree's slide_windows", RadixCache, "slide_windows"),
    Timed("  of which lock floors (_follow_window)", RadixCache, "_follow_window"),
    Timed("prefill checkpoints (cache_unfinished_req)", RadixCache, "cache_unfinished_req"),
    Timed("release (cache on: the finished request's insert)", Scheduler, "release"),
    Timed("model runner forward (inputs, KV indices, window translation, the forward)", ModelRunner, "forward"),
    Timed("  of which the tape replay", GraphRunner, "replay"),
)


@contextmanager
def timers(spent: dict[tuple[str, str], float], current: list[str]) -> Iterator[None]:
    """Wrap every ``TIMED`` attribute; each call adds its thread CPU time to ``spent[(current[0], label)]``."""
    originals = [(t.owner, t.attr, t.owner.__dict__[t.attr]) for t in TIMED]

    def timed(label: str, fn: Callable) -> Callable:
        def call(*args, **kwargs):
            start = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[current[0], label] += time.thread_time() - start

        return call

    try:
        for t, (_, _, fn) in zip(TIMED, originals):
            setattr(t.owner, t.attr, timed(t.label, fn))
        yield
    finally:
        for owner, attr, fn in originals:
            setattr(owner, attr, fn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--runs", type=int, default=8, help="measured runs per engine (after one warm-up run each)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--write", action="store_true", help="write the table into docs/BENCHMARKS.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    checkpoint = default_checkpoint()
    limits = dict(
        max_running_requests=args.batch,
        max_context_len=args.prompt_len + args.new_tokens + 64,
        num_threads=args.threads,
    )
    engines = {
        "on": Engine(EngineConfig(checkpoint, graphs="tape", **limits)),
        "off": Engine(EngineConfig(checkpoint, graphs="tape", prefix_cache=False, **limits)),
    }
    prompts = prompts_for(args.batch, args.prompt_len, engines["on"].model_config.vocab_size)
    spent: dict[tuple[str, str], float] = defaultdict(float)
    per_run: dict[tuple[str, str], list[float]] = defaultdict(list)
    decode: dict[str, list[float]] = {name: [] for name in engines}
    current = ["warm-up"]
    with timers(spent, current):
        for run in range(args.runs + 1):
            for name, engine in engines.items():
                runs = {}
                for new in (1, args.new_tokens):  # decode = the long run less the one-token run, per function too
                    current[0] = f"{name} {new}" if run else "warm-up"
                    before = {t.label: spent[current[0], t.label] for t in TIMED}
                    start = time.thread_time()
                    engine.generate(prompts, SamplingParams(max_new_tokens=new, ignore_eos=True))
                    runs[new] = (
                        time.thread_time() - start,
                        {t.label: spent[current[0], t.label] - before[t.label] for t in TIMED},
                    )
                if run:
                    (short, short_fns), (long, long_fns) = runs[1], runs[args.new_tokens]
                    decode[name].append(long - short)
                    for t in TIMED:
                        per_run[name, t.label].append(long_fns[t.label] - short_fns[t.label])
    ms = {name: statistics.median(v) * 1e3 for name, v in decode.items()}
    # Each run of one engine sits beside the other's in time: the ratio within a pair cancels the machine's drift
    # (its speed moved by 20-30 % over minutes here), which a ratio of two medians does not.
    paired = statistics.median(off / on for on, off in zip(decode["on"], decode["off"]))
    rows = [
        [
            t.label,
            f"{statistics.median(per_run['on', t.label]) * 1e3:.1f}",
            f"{statistics.median(per_run['off', t.label]) * 1e3:.1f}",
            f"{(statistics.median(per_run['on', t.label]) - statistics.median(per_run['off', t.label])) * 1e3:+.1f}",
        ]
        for t in TIMED
    ]
    rows.append(
        [
            "**decode, the run as a whole** (t(new) - t(1))",
            f"**{ms['on']:.1f}**",
            f"**{ms['off']:.1f}**",
            f"**{ms['on'] - ms['off']:+.1f}** (cache on at {ms['off'] / ms['on']:.3f}x the speed of off; "
            f"the median of the {len(decode['on'])} runs' own ratios: {paired:.3f}x)",
        ]
    )
    body = (
        f"Tape engine, batch {args.batch}, {args.prompt_len}-token prompts served from the cache before, "
        f"{args.new_tokens} new tokens, the cache on and off in {args.runs} interleaved runs after one warm-up each, "
        f"{args.threads} torch thread(s); milliseconds of thread CPU time per run, medians. A function's row counts "
        "its calls in decode alone, isolated as the engine bench isolates the run's (the run of new tokens less "
        "the run of one: prefill, its checkpoints and the first token cancel out).\n\n"
        + markdown_table(["function", "cache on ms", "cache off ms", "on - off ms"], rows)
    )
    print(body)
    if args.write:
        write_section(
            f"cache-cost-bs{args.batch}",
            f"What the prefix cache costs a decode run at batch {args.batch}, function by function (CPU)",
            f"python -m bench.cache_cost --batch {args.batch} --runs {args.runs}",
            body,
        )


if __name__ == "__main__":
    main()
