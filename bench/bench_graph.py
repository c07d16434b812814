"""Decode step time: tape replay vs eager for the same attention-like step over the real pool (CPU).

Eager runs the Python step on the raw batch; tape replays the captured graph for the batch's bucket,
including populate, padding and the eager metadata preparation, i.e. the whole replay path.

    python -m bench.bench_graph
"""

from __future__ import annotations

import argparse

import torch

from bench.common import interleaved_medians, markdown_table, write_section
from fixtures.toy_decode import ToyWorld
from harness.graph.backends import make_backend
from harness.graph.runner import GraphRunner


def run(batch_sizes: list[int], repeats: int, layers: int) -> list[list[object]]:
    rows = []
    for bs in batch_sizes:
        world = ToyWorld.build([12] * bs, window=8, swa_layers=[i % 2 == 0 for i in range(layers)],
                               max_bs=max(batch_sizes), max_context_len=64)
        runner = GraphRunner(world.target, make_backend("tape"), max_bs=max(batch_sizes), vocab_size=32, pool=world.pool)
        runner.capture()
        batch = world.next_decode_batch(range(bs))

        def eager() -> None:
            with torch.no_grad():
                world.pool.invalidate_loc_cache()
                world.target.prepare_graph_metadata(batch)
                world.target.graph_forward(batch)

        def tape() -> None:
            world.pool.invalidate_loc_cache()
            runner.replay(batch)

        med = interleaved_medians({"eager": eager, "tape": tape}, repeats=repeats)
        steps = runner.graphs[runner.bucket_for(bs), None].num_steps
        rows.append([bs, runner.bucket_for(bs), steps, f"{med['eager'] * 1e6:.0f}", f"{med['tape'] * 1e6:.0f}",
                     f"{med['eager'] / med['tape']:.2f}x"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = run([1, 8, 32], args.repeats, args.layers)
    table = markdown_table(["bs", "bucket", "tape ops", "eager µs (median)", "tape replay µs (median)", "eager / tape"], rows)
    print(table)
    write_section(
        "graph",
        "Graph runner: tape replay vs eager (CPU)",
        f"python -m bench.bench_graph --repeats {args.repeats} --layers {args.layers}",
        f"Toy decode step ({args.layers} layers, alternating sliding/full, window 8, 12-token prefixes), "
        f"{args.repeats} interleaved repeats per cell.\n\n{table}\n\nGoal: replay no slower than eager (ratio >= 1).",
    )


if __name__ == "__main__":
    main()
