"""Graph memory and start-up on a real model: graphs off vs tape graphs captured at start-up vs lazily.

Each system is built in a fresh process (so its RSS is its own) at the engine's default serving limits
(32 running requests, the 4096-token context cap), then serves one batch of 32 real-text prompts. For
tape graphs it reports what the captured graphs allocated during capture against what they hold after
planning (``harness.graph.tape_memory``: the shared arena plus each graph's private tensors).

    python -m bench.bench_graph_memory [--model DIR] [--write]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.common import markdown_table, write_section

SYSTEMS = {
    "graphs off": ("off", "startup"),
    "tape, start-up capture": ("tape", "startup"),
    "tape, lazy capture": ("tape", "lazy"),
}
PROMPT_TOKENS, NEW_TOKENS, BATCH = 200, 8, 32


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(model: Path, graphs: str, capture: str) -> dict:
    """One system, in this process: build, serve one batch, report."""
    from bench.bench_real_weights import real_prompts
    from harness.engine import Engine, EngineConfig, SamplingParams

    start = time.perf_counter()
    engine = Engine(EngineConfig(model_path=model, graphs=graphs, capture=capture, num_threads=1))
    built = time.perf_counter() - start
    rss_built = _rss_mib()
    prompts = real_prompts(engine.tokenizer, BATCH, PROMPT_TOKENS)
    start = time.perf_counter()
    outputs = engine.generate(prompts, SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    served = time.perf_counter() - start
    runners = [r for r in (engine.runner.graph_runner, engine.runner.extend_graph_runner) if r is not None]
    graphs_list = [g for r in runners for g in r.graphs.values()]
    arenas = {id(g.memory.arena): g.memory.arena.nbytes for g in graphs_list}
    return dict(
        startup_s=built,
        rss_built_mib=rss_built,
        serve_s=served,
        rss_served_mib=_rss_mib(),
        graphs=len(graphs_list),
        allocated_mib=sum(g.memory.owned_nbytes for g in graphs_list) / 2**20,
        held_mib=(sum(arenas.values()) + sum(g.memory.private_nbytes for g in graphs_list)) / 2**20,
        tokens=[o.output_ids for o in outputs],
        running=engine.config.max_running_requests,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="default: the converted Gemma-3-270M in the cache")
    parser.add_argument("--write", action="store_true", help="write the table into docs/BENCHMARKS.md")
    parser.add_argument("--one", nargs=2, metavar=("GRAPHS", "CAPTURE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.model is None:
        from fixtures.real_weights import checkpoint_dir, find_checkpoint

        args.model = find_checkpoint()
        if args.model is None:
            sys.exit(f"no converted checkpoint at {checkpoint_dir()}: run `python -m fixtures.real_weights` first")
    if args.one:
        print(json.dumps(measure(args.model, *args.one)))
        return
    results = {}
    for name, (graphs, capture) in SYSTEMS.items():
        out = subprocess.run(
            [sys.executable, "-m", "bench.bench_graph_memory", "--model", str(args.model), "--one", graphs, capture],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        results[name] = json.loads(out.strip().splitlines()[-1])
        print(name, {k: v for k, v in results[name].items() if k != "tokens"}, flush=True)
    same = len({json.dumps(r["tokens"]) for r in results.values()}) == 1
    rows = []
    for name, r in results.items():
        planned = "-" if not r["graphs"] else f"{r['allocated_mib']:.0f} -> {r['held_mib']:.0f}"
        rows.append(
            [
                name,
                f"{r['startup_s']:.1f}",
                f"{r['rss_built_mib']:.0f}",
                r["graphs"],
                f"{r['serve_s']:.1f}",
                f"{r['rss_served_mib']:.0f}",
                planned,
            ]
        )
    table = markdown_table(
        [
            "system",
            "start-up s",
            "RSS after start-up MiB",
            "graphs captured",
            f"serve {BATCH} prompts s",
            "RSS after serving MiB",
            "graph tensors MiB: allocated -> held",
        ],
        rows,
    )
    body = (
        f"Checkpoint: `{args.model.name}`, default serving limits ({results['graphs off']['running']} running "
        f"requests, context cap 4096), 1 torch thread, each system in a fresh process, one after another. "
        f"Serving: one batch of {BATCH} real-text prompts of {PROMPT_TOKENS} tokens, {NEW_TOKENS} greedy tokens "
        f"each (so lazy capture has captured only the graphs this batch needed). Graph tensors: what the captured "
        f"graphs allocated during capture (what each graph kept before issue 16's planning) -> what they hold "
        f"(the backend's shared arenas plus every graph's private tensors). Greedy tokens identical across the "
        f"three systems: {same}.\n\n{table}"
    )
    if args.write:
        write_section(
            "graph_memory",
            "Real weights: graph memory and start-up, graphs off vs tape (CPU)",
            "python -m bench.bench_graph_memory --write",
            body,
        )
    print(body)


if __name__ == "__main__":
    main()
