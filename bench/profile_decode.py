"""Where one engine decode step spends its time (CPU): the step's phases, and the captured tape by op class.

Builds the engine of ``bench.bench_engine`` (same checkpoint and limits), prefills ``--batch``
prompts, then runs decode steps by hand, timing each phase of ``Engine.step`` (schedule, slot allocation
with the tree's evictions + batch build, graph-runner host work, tape replay, commit with the window slide,
sampling). The engine runs as shipped, prefix cache on, and beside it the same tape engine with the cache off
(issue 58: what the cache costs a decode step, phase by phase). The tape of the bucket the batch
replays is then replayed op by op, each op timed on its own (medians over ``--repeats`` replays),
and summed by op class. Eager (graphs off) forward time is measured alongside for comparison.
All measurements interleave and report medians; the machine is shared, so only ratios within one
run are meaningful.

    python -m bench.profile_decode [--batch 32] [--write]   # --write: the table into docs/BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from functools import partial

import torch

from bench.bench_engine import GOALS, default_checkpoint, hf_runner, prompts_for
from bench.common import markdown_table, write_section
from harness.engine import Engine, EngineConfig, SamplingParams

# aten op name (overload packet) -> class shown in the table
OP_CLASSES: dict[str, str] = {
    "mm": "weight matmuls (qkv, o, gate_up, down, LM head)",
    "addmm": "weight matmuls (qkv, o, gate_up, down, LM head)",
    "index_select": "KV gather (index_select)",
    "index": "index / gather (RoPE tables, KV)",
    "embedding": "embedding",
    "index_put_": "KV write (index_put_)",
    "bmm": "batched matmuls (RoPE rotation; attention scores and sums without the kernel)",
    "baddbmm": "batched matmuls (RoPE rotation; attention scores and sums without the kernel)",
    "_softmax": "softmax",
    "tanh": "soft-cap (tanh)",
    "linalg_vector_norm": "RMSNorm reductions (vector_norm or pow + mean, rsqrt)",
    "pow": "RMSNorm reductions (vector_norm or pow + mean, rsqrt)",
    "mean": "RMSNorm reductions (vector_norm or pow + mean, rsqrt)",
    "rsqrt": "RMSNorm reductions (vector_norm or pow + mean, rsqrt)",
    "decode_attention": "fused decode attention (compiled kernel)",
    "gelu_tanh_and_mul": "activation: gelu × up (compiled kernel)",
    "rms_norm": "RMSNorm (compiled kernel)",
    "gelu": "activation",
    "silu": "activation",
    "roll": "RoPE roll",
    "masked_fill": "masks",
    "bitwise_not": "masks",
    "lt": "masks",
    "ge": "masks",
    "le": "masks",
    "where": "masks",
    "stack": "layout copies (stack, cat, clone, copy_)",
    "cat": "layout copies (stack, cat, clone, copy_)",
    "clone": "layout copies (stack, cat, clone, copy_)",
    "copy_": "layout copies (stack, cat, clone, copy_)",
}
ELEMENTWISE = "elementwise (mul, add, div, ...)"


def clock() -> float:
    return _CLOCK()


_CLOCK = time.perf_counter


def op_name(step) -> str:
    packet = getattr(step.func, "overloadpacket", None)
    return packet.__name__ if packet is not None else "computed and copied"


def op_class(name: str) -> str:
    return OP_CLASSES.get(
        name, ELEMENTWISE if name in {"mul", "add", "div", "sub", "neg", "addcmul"} else f"other ({name})"
    )


def build(graphs: str, threads: int, prompt_len: int, new_tokens: int, *, prefix_cache: bool = True) -> Engine:
    limits = dict(max_running_requests=32, max_context_len=prompt_len + new_tokens + 64, num_threads=threads)
    return Engine(EngineConfig(default_checkpoint(), graphs=graphs, prefix_cache=prefix_cache, **limits))


def start_decoding(engine: Engine, batch: int, prompt_len: int, new_tokens: int) -> None:
    """The batch's prompts once to the end, then again up to their first decode step: as in the engine bench's
    repeats, a prefix cache then serves the prompts and holds the first round's KV (its evictions included)."""
    vocab = engine.model_config.vocab_size
    prompts = prompts_for(batch, prompt_len, vocab)
    params = SamplingParams(max_new_tokens=new_tokens, ignore_eos=True)
    engine.generate(prompts, params)
    for p in prompts:
        engine.add_request(p, params)
    while any(not r.prefill_done for r in engine.scheduler.running) or engine.scheduler.waiting:
        engine.step()


def timed_step(engine: Engine) -> dict[str, float]:
    """One ``Engine.step`` of a decode batch, split into phases (seconds)."""
    from harness.engine.sampling import sample

    runner, sched = engine.runner, engine.scheduler
    t0 = clock()
    s = sched.schedule()
    ta = clock()
    batch = sched.build_forward_batch(s)
    t1 = clock()
    phases = {"schedule (host)": ta - t0, "allocate (tree evictions included) + build batch (host)": t1 - ta}
    if runner.graph_runner is not None:
        gr = runner.graph_runner
        runner._begin_forward()
        gr.can_run(batch)
        batch.out_cache_loc_swa = runner.pretranslate_swa_loc(batch)
        bs, kv_len = gr.bucket_for(batch.batch_size), gr.kv_bucket_for(batch)
        gr.buffers.populate(batch, bs)
        t2 = clock()
        runner.attn_backend.prepare_graph_metadata(gr.buffers.view(bs, kv_len))
        t3 = clock()
        gr.graphs[bs, kv_len].replay(gr.buffers.tensors())
        logits = gr.buffers.logits[: batch.batch_size]
        t4 = clock()
        phases["graph inputs: memo, buckets, populate (host)"] = t2 - t1
        phases["decode metadata: KV indices, window translation (host)"] = t3 - t2
        phases["tape replay"] = t4 - t3
        runner.paths["decode-graph"] += 1
    else:
        logits = runner.forward(batch)
        t4 = clock()
        phases["eager forward"] = t4 - t1
    sampling = sched.commit(s)
    t5 = clock()
    tokens = sample(logits, sampling)
    for req, token in zip(sampling, tokens):
        engine._append_token(req, token)
        if req.finished:
            sched.release(req)
    phases["commit: KV lengths, window slide (host)"] = t5 - t4
    phases["sample, append (host)"] = clock() - t5
    return phases


def hf_step_seconds(batch: int, prompt_len: int, new_tokens: int, repeats: int = 3) -> float:
    """transformers ``generate``'s decode time per step on the profile's clock, as the engine bench measures it."""
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(
        default_checkpoint(), attn_implementation="eager", dtype=torch.float32
    ).eval()
    run = hf_runner(hf, prompts_for(batch, prompt_len, hf.config.vocab_size))
    samples = []
    for _ in range(repeats):
        t0 = clock()
        run(1)
        t1 = clock()
        run(new_tokens)
        t2 = clock()
        samples.append(((t2 - t1) - (t1 - t0)) / (new_tokens - 1))
    return statistics.median(samples)


def tape_profile(engine: Engine, repeats: int) -> tuple[dict[str, float], dict[str, int], int, float, tuple]:
    """Per op class: median seconds per replay (summed over the class's ops) and op counts, for the graph the
    engine's current batch replays; and the whole replay's median."""
    gr, sched = engine.runner.graph_runner, engine.scheduler
    bs = gr.bucket_for(len(sched.running))
    longest = max(r.kv_len for r in sched.running) + 1
    kv_len = next(k for k in gr.kv_len_buckets if k is None or k >= longest)
    graph = gr.graphs[bs, kv_len]
    steps = graph._steps
    # (tapes older than issue 19 bound nothing at capture: bind here, so the profile runs on either)
    calls = [getattr(step, "call", None) or partial(step.func, *step.args, **step.kwargs) for step in steps]
    per_op: list[list[float]] = [[] for _ in steps]
    whole = []
    for _ in range(repeats):
        t0 = clock()
        graph.replay()
        whole.append(clock() - t0)
        with torch.inference_mode():  # as replay runs them
            for i, call in enumerate(calls):
                a = clock()
                call()
                per_op[i].append(clock() - a)
    by_class: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for step, samples in zip(steps, per_op):
        cls = op_class(op_name(step))
        by_class[cls] += statistics.median(samples)
        counts[cls] += 1
    return by_class, counts, len(steps), statistics.median(whole), (bs, kv_len, longest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: perf_counter; cpu: this thread's CPU time (leaves out time the OS gave to other "
        "processes, for a shared machine)",
    )
    parser.add_argument("--write", action="store_true", help="write the tables into docs/BENCHMARKS.md")
    args = parser.parse_args()
    global _CLOCK
    _CLOCK = time.perf_counter if args.clock == "wall" else time.thread_time
    torch.set_num_threads(args.threads)
    rounds, per_round, settle = 2, 24, 4  # the first steps of a round run on caches the other engine left
    steps_wanted = rounds * (per_round - settle)
    new_tokens = max(args.new_tokens, rounds * per_round + 2)
    engines = {
        "tape": build("tape", args.threads, args.prompt_len, new_tokens),
        "tape, cache off": build("tape", args.threads, args.prompt_len, new_tokens, prefix_cache=False),
        "off": build("off", args.threads, args.prompt_len, new_tokens),
    }
    for e in engines.values():
        start_decoding(e, args.batch, args.prompt_len, new_tokens)
    phase_samples: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in engines}
    with torch.no_grad():
        for _ in range(rounds):  # interleaved: a few consecutive steps of each engine in turn
            for name, e in engines.items():
                for i in range(per_round):
                    for phase, sec in timed_step(e).items():
                        if i >= settle:
                            phase_samples[name][phase].append(sec)
        by_class, counts, n_ops, replay_s, (bucket, kv_len, longest) = tape_profile(engines["tape"], args.repeats)
    hf_step = hf_step_seconds(args.batch, args.prompt_len, args.new_tokens)

    def us(x: float) -> str:
        return f"{x * 1e6:.0f}"

    phase_rows = []
    totals, medians = {}, {}
    labels = {
        "tape": "graphs tape, cache on",
        "tape, cache off": "graphs tape, cache off",
        "off": "graphs off, cache on",
    }
    for name in engines:
        med = medians[name] = {p: statistics.median(s) for p, s in phase_samples[name].items()}
        totals[name] = sum(med.values())
        for phase, sec in med.items():
            phase_rows.append([labels[name], phase, us(sec), f"{sec / totals[name]:.0%}"])
        phase_rows.append([labels[name], "**step (sum of medians)**", f"**{us(totals[name])}**", "100%"])
    phase_table = markdown_table(["engine", "phase", "µs (median)", "share"], phase_rows)
    on, off = medians["tape"], medians["tape, cache off"]
    cache_rows = [[phase, us(on[phase]), us(off[phase]), f"{(on[phase] - off[phase]) * 1e6:+.0f}"] for phase in on]
    cache_rows.append(
        [
            "**step (sum of medians)**",
            f"**{us(totals['tape'])}**",
            f"**{us(totals['tape, cache off'])}**",
            f"**{(totals['tape'] - totals['tape, cache off']) * 1e6:+.0f}**",
        ]
    )
    cache_table = markdown_table(["phase (tape)", "cache on µs", "cache off µs", "on - off µs"], cache_rows)
    op_total = sum(by_class.values())
    op_rows = [
        [cls, counts[cls], us(sec), f"{sec / op_total:.0%}"]
        for cls, sec in sorted(by_class.items(), key=lambda kv: -kv[1])
    ]
    op_rows.append(["**sum of per-op medians**", n_ops, f"**{us(op_total)}**", "100%"])
    op_table = markdown_table(["op class", "ops per step", "µs per step (median)", "share"], op_rows)
    tape = {p: statistics.median(s) for p, s in phase_samples["tape"].items()}
    host = sum(sec for phase, sec in tape.items() if "(host)" in phase and "decode metadata" not in phase)
    matmuls = by_class.get(OP_CLASSES["mm"], 0.0)
    goal = GOALS.get(args.batch)
    budget = ""
    if goal is not None:
        allowed = hf_step / goal
        budget = (
            f"\n\nBudget at batch {args.batch}: transformers takes {us(hf_step)} µs per step on the same clock, so "
            f"{goal}x needs a step of at most {us(allowed)} µs. The engine's host work around the forward (scheduling, "
            f"graph inputs, commit and sampling: the scheduler, allocator and runner, none of it model or tape code) "
            f"takes {us(host)} µs of it and the weight matmuls alone {us(matmuls)} µs: "
            + (
                f"together {us(host + matmuls)} µs, more than the whole budget, so no attention or tape work can "
                f"reach {goal}x at this batch size."
                if host + matmuls > allowed
                else f"together {us(host + matmuls)} µs, leaving {us(allowed - host - matmuls)} µs for everything else."
            )
        )
    text = (
        f"Engine decode step at batch {args.batch} (checkpoint of the engine bench, {args.prompt_len}-token prompts, "
        f"medians of {steps_wanted} steps per engine, taken in rounds of {per_round} consecutive steps (the first "
        f"{settle} of each left out), engines interleaved, "
        f"{args.threads} torch thread(s), "
        f"{'wall clock' if args.clock == 'wall' else 'thread CPU clock (the machine is shared)'}).\n\n"
        f"{phase_table}\n\n"
        f"What the prefix cache costs the tape engine's step, phase by phase (the same medians; with the cache on "
        f"a step runs at {totals['tape, cache off'] / totals['tape']:.2f}x the speed of one with it off):"
        f"\n\n{cache_table}\n\n"
        f"Tape of that step: the graph of bucket (bs {bucket}, KV length {kv_len}), whose full-attention layers read "
        f"{kv_len} keys per row where the longest row holds {longest} (eager reads exactly the longest); "
        f"{n_ops} replayed ops, whole replay {us(replay_s)} µs when replayed back to back "
        f"(median of {args.repeats}; caches hot, so less than inside a step, where weights and KV come from memory); "
        f"each op timed on its own (median), by class:\n\n{op_table}{budget}"
    )
    print(text)
    if args.write:
        write_section(
            f"profile-bs{args.batch}",
            f"Profile: one engine decode step at batch {args.batch} (CPU)",
            f"python -m bench.profile_decode --batch {args.batch} --repeats {args.repeats} --threads {args.threads} "
            f"--clock {args.clock} --write",
            text,
        )


if __name__ == "__main__":
    main()
