"""Decode step time: graph replay vs eager for the same attention-like step over the real pool.

Eager runs the Python step on the raw batch; the graph backend (the CPU tape, or a CUDA graph with
``--device cuda``) replays the captured graph for the batch's bucket, including populate, padding and
the eager metadata preparation, i.e. the whole replay path.

    python -m bench.bench_graph                 # CPU: tape vs eager
    python -m bench.bench_graph --device cuda   # GPU: CUDA graph vs eager (synchronised per call)

Each call is timed on the wall clock and, on CPU, on this thread's CPU clock too: on a shared machine
the wall clock also counts the time other processes held the core, the CPU clock only this process's
work (the two agree on an idle machine).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from bench.common import markdown_table, write_section
from fixtures.toy_decode import ToyWorld
from harness.graph.backends import make_backend
from harness.graph.runner import GraphRunner

GOALS = {1: 2.0, 32: 1.2}  # issue 19: tape >= 2x eager at bs 1, >= 1.2x at bs 32


def interleaved_medians_wall_cpu(
    fns: dict[str, Callable[[], object]], *, repeats: int, warmup: int = 3
) -> dict[str, tuple[float, float]]:
    """Median (wall, thread CPU) seconds per call of each function, calls interleaved."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            w0, c0 = time.perf_counter(), time.thread_time()
            fn()
            c1, w1 = time.thread_time(), time.perf_counter()
            wall[name].append(w1 - w0)
            cpu[name].append(c1 - c0)
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in fns}


def call_path(step) -> str:
    """How a tape step calls its op at replay (``harness.graph.tape_replay.bound_call``)."""
    if step.fast is not None:
        return "Python binding"
    if getattr(step.call, "func", None) is torch._C._dispatch_call_boxed:
        return "dispatcher boxed call (no Python binding)"
    return "jit entry point (no Python binding)" if isinstance(step.func, torch._ops.OpOverload) else "Python"


def replay_profile(
    world: ToyWorld, runner: GraphRunner, batch, repeats: int
) -> tuple[list[list[object]], list[list[object]]]:
    """Where the tape path's time goes for ``batch``: the phases of ``GraphRunner.replay`` (each timed on
    its own, medians), then the replayed ops by aten name, each op timed on its own (medians, summed)."""
    bs = runner.bucket_for(batch.batch_size)
    graph = runner.graphs[bs, None]
    static = runner.buffers.tensors()

    def metadata() -> None:
        world.pool.invalidate_loc_cache()
        world.target.prepare_graph_metadata(runner.buffers.view(bs))

    phases = {
        "populate the static inputs": lambda: runner.buffers.populate(batch, bs),
        "attention metadata (eager; the eager step runs it too)": metadata,
        "tape replay": lambda: graph.replay(static),
    }
    med = interleaved_medians_wall_cpu(phases, repeats=repeats)
    phase_rows = [[name, f"{cpu * 1e6:.0f}"] for name, (_, cpu) in med.items()]
    steps = graph._steps
    samples: list[list[float]] = [[] for _ in steps]
    with torch.inference_mode():  # as replay runs them
        for _ in range(repeats):
            for i, step in enumerate(steps):
                c0 = time.thread_time()
                step.call()
                samples[i].append(time.thread_time() - c0)
    by_op: dict[tuple[str, str], list[float]] = {}
    for step, times in zip(steps, samples):
        packet = getattr(step.func, "overloadpacket", None)
        name = packet.__name__ if packet is not None else "computed and copied"
        via = call_path(step)
        by_op.setdefault((name, via), []).append(statistics.median(times))
    op_rows = [
        [name, via, len(t), f"{sum(t) * 1e6:.0f}", f"{sum(t) / len(t) * 1e6:.1f}"]
        for (name, via), t in sorted(by_op.items(), key=lambda kv: -sum(kv[1]))
    ]
    return phase_rows, op_rows


def run(
    batch_sizes: list[int], repeats: int, layers: int, device: str = "cpu"
) -> tuple[list[list[object]], tuple | None]:
    """The table rows, and on CPU the ``replay_profile`` of the smallest goal's batch size."""
    backend = "tape" if device == "cpu" else "cuda"
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    rows, profile = [], None
    for bs in batch_sizes:
        world = ToyWorld.build(
            [12] * bs,
            window=8,
            swa_layers=[i % 2 == 0 for i in range(layers)],
            max_bs=max(batch_sizes),
            max_context_len=64,
            device=device,
        )
        runner = GraphRunner(
            world.target,
            make_backend(backend),
            max_bs=max(batch_sizes),
            vocab_size=32,
            is_hybrid_swa=True,
            device=world.pool.device,
        )
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

        med = interleaved_medians_wall_cpu({"eager": eager, "graph": graph}, repeats=repeats)
        (eager_wall, eager_cpu), (graph_wall, graph_cpu) = med["eager"], med["graph"]
        captured = runner.graphs[runner.bucket_for(bs), None]
        ops = captured.num_steps if backend == "tape" else "-"
        row = [
            bs,
            runner.bucket_for(bs),
            ops,
            f"{eager_wall * 1e6:.0f}",
            f"{graph_wall * 1e6:.0f}",
            f"{eager_wall / graph_wall:.2f}x",
        ]
        if device == "cpu":
            row += [f"{eager_cpu * 1e6:.0f}", f"{graph_cpu * 1e6:.0f}", f"{eager_cpu / graph_cpu:.2f}x"]
        rows.append(row)
        if device == "cpu" and bs == min(GOALS):
            profile = replay_profile(world, runner, batch, repeats)
    return rows, profile


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--device", default="cpu", help="cpu (tape backend) or cuda (CUDA graph backend)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (ops this small run fastest on one, as in bench_engine)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows, profile_rows = run([1, 8, 32], args.repeats, args.layers, args.device)
    name = "tape" if args.device == "cpu" else "CUDA graph"
    header = ["bs", "bucket", "tape ops", "eager µs (median)", f"{name} replay µs (median)", f"eager / {name}"]
    goals = "Goal: replay no slower than eager (ratio >= 1)."
    if args.device == "cpu":
        header += ["eager CPU µs", "tape CPU µs", "eager / tape (CPU)"]
        verdicts = []
        for row in rows:
            if row[0] in GOALS:
                wall, cpu = float(row[5][:-1]), float(row[8][:-1])
                verdicts.append(
                    f"bs {row[0]} >= {GOALS[row[0]]}x: wall {row[5]} "
                    f"({'met' if wall >= GOALS[row[0]] else 'not met'}), CPU {row[8]} "
                    f"({'met' if cpu >= GOALS[row[0]] else 'not met'})"
                )
        goals = "Goal (issue 19): " + "; ".join(verdicts) + "."
    table = markdown_table(header, rows)
    print(table, goals, sep="\n")
    if profile_rows:
        phases, ops = profile_rows
        profile = (
            f"\n\nWhere the tape path's time goes at bs {min(GOALS)} (thread CPU clock, medians of "
            f"{args.repeats}, each part timed on its own, so hotter than inside one call):\n\n"
            + markdown_table(["phase of GraphRunner.replay", "µs"], phases)
            + "\n\nReplayed ops by aten name (each op timed on its own):\n\n"
            + markdown_table(["op", "called through", "ops", "µs", "µs per op"], ops)
        )
        print(profile)
        goals += profile
    gpu = "" if args.device == "cpu" else f", {torch.cuda.get_device_name(args.device)}"
    write_section(
        "graph" if args.device == "cpu" else "graph-cuda",
        f"Graph runner: {name} replay vs eager ({args.device}{gpu})",
        f"python -m bench.bench_graph --repeats {args.repeats} --layers {args.layers} --threads {args.threads}"
        + ("" if args.device == "cpu" else f" --device {args.device}"),
        f"Toy decode step ({args.layers} layers, alternating sliding/full, window 8, 12-token prefixes), "
        f"{args.repeats} interleaved repeats per cell; each call timed on the wall clock and on the thread's CPU "
        f"clock (the machine is shared: the wall clock also counts other processes' time slices).\n\n{table}\n\n"
        f"{goals}",
    )


if __name__ == "__main__":
    main()
