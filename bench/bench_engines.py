"""Every engine on the same checkpoints, side by side in one run: do they agree with transformers, and how fast are
they. Real servers, one at a time, each asked over its OpenAI API by the same client.

Agreement (``Cross-engine differential``): per engine and shipped checkpoint, the 16 lm-eval prompts of
``suites/servers/oracles.lm_eval_prompts`` (200-230 tokens, 13-15 windows) at once, greedy, 48 tokens, top-5 logprobs,
against transformers (``suites/servers/oracles.py``): how many answers equal transformers', the worst |Δlogprob|.
The harness engine is asked in-process (its server has no logprobs); the servers over HTTP.

Speed (``Engines side by side``): tokens/s of each server on the Gemma3 checkpoint, generating 128 tokens (EOS
ignored) for the same 16 prompts, at batch 1 (one request after another) and 16 concurrent; the median of
``--repeats`` rounds after a warm-up round. Wall time per round, start-up excluded.

SGLang lives in its own venv: ``--sglang-python`` names that venv's interpreter and its servers run on it, in this
same run. An engine that cannot serve a checkpoint gets a row that says why, in one line.

    .nox/vllm/bin/python -m bench.bench_engines --sglang-python .nox/sglang_server/bin/python
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.common import markdown_table, write_section
from harness.servers.base import ServerKind, ServerSpec
from harness.servers.harness_server import HarnessServer
from harness.servers.lifecycle import ServerLaunchError, ServerProcess
from harness.servers.sglang_server import CPU_FLAGS as SGLANG_CPU_FLAGS
from harness.servers.sglang_server import SGLangServer
from harness.servers.vllm import CPU_FLAGS as VLLM_CPU_FLAGS
from harness.servers.vllm import VLLMServer
from harness.paths import REPO
from suites.servers.oracles import (
    VLLM_BY_ID,
    Reference,
    agreement,
    free_port,
    harness_reference,
    lm_eval_prompts,
    serve_all,
    transformers_reference,
)

MODELS = REPO / "fixtures" / "models"
CHECKPOINTS = ("gemma2-tiny-swa", "gemma3-tiny-swa", "mellum-tiny-swa")
SPEED_CHECKPOINT = "gemma3-tiny-swa"  # the one checkpoint every engine serves (SGLang 0.5.23 cannot load Gemma2)
SPEED_TOKENS = 128
NEW_TOKENS = 48  # of the agreement run, as suites/servers/test_vllm_server.py asks


def prompts() -> list[str]:
    return lm_eval_prompts(8)


OUT = REPO / "reports" / "bench-engines.json"


@dataclass(frozen=True)
class Server:
    """One engine configuration: how to start it and what a request to it adds."""

    label: str
    engine: ServerKind
    graphs: str
    flags: tuple[str, ...]
    extra: dict | None = None  # request fields
    logprobs: bool = True  # it returns top logprobs over HTTP


def servers(threads: int) -> list[Server]:
    sglang_pool = (*SGLANG_CPU_FLAGS, "--max-running-requests", "16")
    return [
        Server(
            "harness (tape)",
            HarnessServer(),
            "tape",
            ("--max-running", "16", "--num-threads", str(threads), "--device", "cpu"),
            logprobs=False,
        ),
        Server("vLLM eager", VLLMServer(), "off", VLLM_CPU_FLAGS, VLLM_BY_ID),
        Server("vLLM compiled", VLLMServer(), "on", VLLM_CPU_FLAGS, VLLM_BY_ID),
        Server("SGLang eager", SGLangServer(), "off", sglang_pool),
        Server(
            "SGLang CPU graphs (bs 1 2 4 8 16)",
            SGLangServer(),
            "on",
            (*sglang_pool, "--cuda-graph-bs-decode", "1", "2", "4", "8", "16"),
        ),
    ]


@dataclass
class Row:
    engine: str
    checkpoint: str
    equal: int | None = None
    n: int | None = None
    worst: float | None = None
    start_s: float | None = None
    tok_s_1: float | None = None
    tok_s_16: float | None = None
    pool: str = ""  # what the engine's KV memory was, from its log
    error: str | None = None


def pool_of(log: str) -> str:
    """How the server laid out its KV memory, as its log says."""
    if groups := re.search(r"kv cache group sizes \(([\d, ]+)\)", log):
        return f"{len(groups[1].split(','))} KV cache groups (hybrid manager)"
    if found := re.search(r"hybrid_swa=(True|False)", log):
        return "SWAKVPool (hybrid SWA)" if found[1] == "True" else "one full pool (hybrid_swa=False)"
    return ""


def start(server: Server, ckpt: Path, log: Path, python: str) -> ServerProcess:
    spec = ServerSpec(
        model=str(ckpt),
        served_name="swa-harness",
        graphs=server.graphs,
        flags=server.flags,
        port=0 if isinstance(server.engine, HarnessServer) else free_port(),
    )
    return server.engine.start(spec, log_path=log, timeout=900, python=python)


def tokens_per_s(srv: ServerProcess, texts: list[str], concurrent: int, repeats: int) -> float:
    """Median over ``repeats`` rounds (after one warm-up) of generated tokens / wall seconds."""
    import urllib.request

    def one(prompt: str) -> int:
        body = json.dumps(
            {"model": "swa-harness", "prompt": prompt, "max_tokens": SPEED_TOKENS, "temperature": 0, "ignore_eos": True}
        ).encode()
        req = urllib.request.Request(srv.completions_url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=900) as resp:
            return int(json.loads(resp.read())["usage"]["completion_tokens"])

    rates = []
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        with ThreadPoolExecutor(concurrent) as pool:
            tokens = sum(pool.map(one, texts))
        rates.append(tokens / (time.perf_counter() - t0))
    return statistics.median(rates[1:])


def measure(
    server: Server, ckpt: Path, reference: Reference, python: str, log_dir: Path, speed: bool, repeats: int
) -> Row:
    row = Row(server.label, ckpt.name)
    t0 = time.perf_counter()
    log = log_dir / f"{ckpt.name}-{server.label.split()[0]}-{server.graphs}.log"
    try:
        srv = start(server, ckpt, log, python)
    except (ServerLaunchError, ValueError) as exc:  # the reason ends with the server's last exception
        row.error = f"does not start: {getattr(exc, 'reason', exc)}"
        return row
    try:
        row.start_s = round(time.perf_counter() - t0, 1)
        row.pool = pool_of(log.read_text(errors="replace"))
        if server.logprobs:
            found = agreement(serve_all(srv, "swa-harness", prompts(), NEW_TOKENS, extra=server.extra), reference)
            row.equal, row.n, row.worst = found.equal, found.n, found.worst
        if speed:
            row.tok_s_1 = round(tokens_per_s(srv, prompts(), 1, repeats), 1)
            row.tok_s_16 = round(tokens_per_s(srv, prompts(), 16, repeats), 1)
    except AssertionError as exc:
        row.error = str(exc).splitlines()[0]
    finally:
        srv.stop()
    return row


def render(rows: list[Row], commands: list[str]) -> None:
    """The two tables; ``commands``: the full run's, then each ``--only`` run's (whose rows replaced some)."""
    order = {label: i for i, label in enumerate(["harness (tape, in-process)", *(s.label for s in servers(0))])}
    rows = sorted(rows, key=lambda r: (CHECKPOINTS.index(r.checkpoint), order.get(r.engine, len(order))))
    reruns = "".join(f"`, then these rows again: `{c}" for c in commands[1:])
    agree = [r for r in rows if r.equal is not None or (r.error and r.tok_s_1 is None)]
    write_section(
        "cross-engine",
        "Cross-engine differential: every engine vs transformers on the shipped checkpoints (CPU)",
        commands[0] + reruns,
        "16 lm-eval prompts at once (200-230 tokens), greedy, 48 tokens, top-5 logprobs per token; transformers "
        "(eager attention, fp32, one prompt at a time) is the oracle. A wrong KV block or window moves logprobs by "
        "whole nats; kernel and summation-order differences stay near 1e-5. An engine that cannot serve a "
        "checkpoint says why in its own words; each such case is written up in docs/FINDINGS.md.\n\n"
        + markdown_table(
            ["engine", "checkpoint", "answers equal", "worst \\|Δlogprob\\| (nats)", "KV memory", "note"],
            [
                [
                    r.engine,
                    r.checkpoint,
                    f"{r.equal}/{r.n}" if r.n else "—",
                    f"{r.worst:.2g}" if r.worst is not None else "—",
                    r.pool,
                    r.error or "",
                ]
                for r in agree
            ],
        ),
    )
    speed = [r for r in rows if r.tok_s_1 is not None]
    base = next((r for r in speed if r.engine.startswith("harness")), None)
    write_section(
        "engines-speed",
        "Engines side by side: tokens/s on the Gemma3 checkpoint (CPU)",
        commands[0],
        f"The same 16 prompts (200-230 tokens), {SPEED_TOKENS} tokens each, EOS ignored, over each server's "
        "OpenAI API: batch 1 is one request after another, 16 is all at once; median of the rounds after a warm-up, "
        "start-up excluded. One server at a time, one run.\n\n"
        + markdown_table(
            ["engine", "start-up (s)", "tok/s batch 1", "tok/s 16 concurrent", "harness ÷ it (1 / 16)"],
            [
                [
                    r.engine,
                    r.start_s,
                    r.tok_s_1,
                    r.tok_s_16,
                    f"{base.tok_s_1 / r.tok_s_1:.2f} / {base.tok_s_16 / r.tok_s_16:.2f}" if base else "—",
                ]
                for r in speed
            ],
        ),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoints", default=",".join(CHECKPOINTS))
    ap.add_argument("--sglang-python", default=None, help="the interpreter of the SGLang server venv")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of the harness server (others: all cores)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--logs", type=Path, default=REPO / "reports" / "bench-engines")
    ap.add_argument("--render", action="store_true", help="only re-render the tables from the saved results")
    ap.add_argument(
        "--only",
        default=None,
        help="measure only the servers whose label starts with this (e.g. SGLang); their rows replace "
        "the same engine's and checkpoint's in the saved results, and the tables are re-rendered",
    )
    args = ap.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    command = "python -m bench.bench_engines " + " ".join(argv if argv is not None else sys.argv[1:])
    commands_file = OUT.with_suffix(".commands.json")  # the full run's command, then each --only run's
    if args.render:
        rows, commands = [Row(**r) for r in json.loads(OUT.read_text())], json.loads(commands_file.read_text())
    elif args.only:
        saved = [Row(**r) for r in json.loads(OUT.read_text())]
        fresh = measure_all(args, lambda s: s.label.startswith(args.only), with_harness=False)
        keys = {(r.engine, r.checkpoint) for r in fresh}
        rows = [r for r in saved if (r.engine, r.checkpoint) not in keys] + fresh
        commands = [*json.loads(commands_file.read_text()), command]
    else:
        rows, commands = measure_all(args, lambda s: True, with_harness=True), [command]
    commands_file.write_text(json.dumps(commands) + "\n")
    OUT.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    render(rows, commands)
    return 0


def measure_all(args: argparse.Namespace, wanted: Callable[[Server], bool], with_harness: bool) -> list[Row]:
    rows: list[Row] = []
    for name in args.checkpoints.split(","):
        ckpt = MODELS / name
        reference = transformers_reference(ckpt, prompts(), NEW_TOKENS)
        if with_harness:
            harness = harness_reference(ckpt, prompts(), NEW_TOKENS)
            found = agreement(list(zip(harness.answers, harness.tops)), reference)
            rows.append(
                Row(
                    "harness (tape, in-process)",
                    name,
                    found.equal,
                    found.n,
                    found.worst,
                    pool="SWA + full pools (hybrid)",
                )
            )
        for server in filter(wanted, servers(args.threads)):
            sglang = isinstance(server.engine, SGLangServer)
            if (sglang and not args.sglang_python) or (not server.logprobs and name != SPEED_CHECKPOINT):
                continue  # no SGLang venv named; or nothing to measure (no logprobs, and no speed on this one)
            python = args.sglang_python if sglang else sys.executable
            row = measure(server, ckpt, reference, python, args.logs, name == SPEED_CHECKPOINT, args.repeats)
            print(json.dumps(asdict(row)), flush=True)
            rows.append(row)
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
