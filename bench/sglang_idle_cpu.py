"""What an idle real SGLang CPU server costs the processes beside it: its process tree's CPU seconds over a quiet
interval, as the harness starts it (``--sleep-on-idle``) and without that flag (its scheduler's busy poll loop).

    python -m bench.sglang_idle_cpu [--idle-s 20]     (in the nox -s sglang_server venv)

Writes the "SGLang CPU server at idle" section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import psutil

import harness.servers.sglang_server as sglang
from bench.common import write_section
from harness.paths import REPO
from harness.servers.base import ServerSpec
from suites.servers.oracles import free_port, running

MODEL = "fixtures/models/mellum-tiny-swa"
SETTLE_S = 5.0  # start-up's last work (the first metrics, warm-up) out of the interval


def idle_cpu_seconds(busy_poll: bool, idle_s: float, log: Path) -> tuple[float, int]:
    """CPU seconds the server's processes used over ``idle_s`` with no request, and how many processes there were."""
    args = sglang.sglang_args
    if busy_poll:  # the flag taken out of the command line again, as servers were started before it
        sglang.sglang_args = lambda spec: tuple(a for a in args(spec) if a != "--sleep-on-idle")
    try:
        spec = ServerSpec(model=MODEL, served_name="m", graphs="off", flags=sglang.CPU_FLAGS, port=free_port())
        with running(sglang.SGLangServer(), spec, log, timeout=900) as server:
            time.sleep(SETTLE_S)
            procs = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
            before = sum(sum(p.cpu_times()[:2]) for p in procs)
            time.sleep(idle_s)
            return sum(sum(p.cpu_times()[:2]) for p in procs) - before, len(procs)
    finally:
        sglang.sglang_args = args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sglang_idle_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle-s", type=float, default=20.0)
    args = parser.parse_args(argv)
    rows = []
    with TemporaryDirectory() as tmp:
        for label, busy in (("`--sleep-on-idle` (as the harness starts it)", False), ("without it", True)):
            cpu, n = idle_cpu_seconds(busy, args.idle_s, Path(tmp) / f"{busy}.log")
            rows.append(f"| {label} | {n} | {cpu:.1f} CPU-s | {cpu / args.idle_s:.0%} of a core |")
            print(rows[-1])
    body = "\n".join(
        [
            f"Real SGLang on CPU over `{MODEL}` (`CPU_FLAGS`, graphs off), idle for {args.idle_s:g} s after "
            f"start-up; the CPU time of its process tree (launcher, scheduler, detokenizer) over that interval.",
            "",
            "| server | processes | CPU over the idle interval | share |",
            "|---|---|---|---|",
            *rows,
        ]
    )
    write_section(
        "sglang-idle", "SGLang CPU server at idle", f"python -m bench.sglang_idle_cpu --idle-s {args.idle_s:g}", body
    )
    print(f"wrote {REPO / 'docs' / 'BENCHMARKS.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
