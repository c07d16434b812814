"""Decode step time: graph replay vs eager for the same attention-like step over the real pool.

Eager runs the Python step on the raw batch; the graph backend (the CPU tape, or a CUDA graph with
``--device cuda``) replays the captured graph for the batch's bucket, including populate, padding and
the eager metadata preparation, i.e. the whole replay path.

    python -m bench.bench_graph                 # CPU: tape vs eager
    python -m bench.bench_graph --device cuda   # GPU: CUDA graph vs eager (synchronised per call)
"""

from __future__ import annotations

import argparse

import torch

from bench.common import interleaved_medians, markdown_table, write_section
from fixtures.toy_decode import ToyWorld
from harness.graph.backends import make_backend
from harness.graph.runner import GraphRunner


def run(batch_sizes: list[int], repeats: int, layers: int, device: str = "cpu") -> list[list[object]]:
    backend = "tape" if device == "cpu" else "cuda"
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    rows = []
    for bs in batch_sizes:
        world = ToyWorld.build([12] * bs, window=8, swa_layers=[i % 2 == 0 for i in range(layers)],
                               max_bs=max(batch_sizes), max_context_len=64, device=device)
        runner = GraphRunner(world.target, make_backend(backend), max_bs=max(batch_sizes), vocab_size=32,
                             is_hybrid_swa=True, device=world.pool.device)
        runner.capture()
        batch = world.next_decode_batch(range(bs))

        def eager() -> None:
            with torch.no_grad():
                world.pool.invalidate_loc_cache()
                world.target.prepare_graph_metadata(batch)
                world.target.graph_forward(batch)
            sync()

        def graph() -> None:
            world.pool.invalidate_loc_cache()
            runner.replay(batch)
            sync()

        med = interleaved_medians({"eager": eager, "graph": graph}, repeats=repeats)
        captured = runner.graphs[runner.bucket_for(bs), None]
        ops = captured.num_steps if backend == "tape" else "-"
        rows.append([bs, runner.bucket_for(bs), ops, f"{med['eager'] * 1e6:.0f}", f"{med['graph'] * 1e6:.0f}",
                     f"{med['eager'] / med['graph']:.2f}x"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--device", default="cpu", help="cpu (tape backend) or cuda (CUDA graph backend)")
    args = parser.parse_args()
    torch.manual_seed(0)
    rows = run([1, 8, 32], args.repeats, args.layers, args.device)
    name = "tape" if args.device == "cpu" else "CUDA graph"
    table = markdown_table(["bs", "bucket", "tape ops", "eager µs (median)", f"{name} replay µs (median)", f"eager / {name}"], rows)
    print(table)
    gpu = "" if args.device == "cpu" else f", {torch.cuda.get_device_name(args.device)}"
    write_section(
        "graph" if args.device == "cpu" else "graph-cuda",
        f"Graph runner: {name} replay vs eager ({args.device}{gpu})",
        f"python -m bench.bench_graph --repeats {args.repeats} --layers {args.layers}"
        + ("" if args.device == "cpu" else f" --device {args.device}"),
        f"Toy decode step ({args.layers} layers, alternating sliding/full, window 8, 12-token prefixes), "
        f"{args.repeats} interleaved repeats per cell.\n\n{table}\n\nGoal: replay no slower than eager (ratio >= 1).",
    )


if __name__ == "__main__":
    main()
