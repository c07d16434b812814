"""Line coverage of vLLM's KV-cache manager by ``suites/vllm``, over the lines a real CPU server runs (issue 56).

    python -m bench.vllm_coverage            # in the venv of `nox -s vllm` (coverage is a test extra)
    python -m bench.vllm_coverage --run added  # only the added tests again; --run alone: recount the data left

A suite's coverage of a whole file says little where most of the file is code a CPU server never runs (KV
connectors, Mamba, DCP, encoder caches). So the measure is relative to a server: first a real vLLM CPU server
(``harness.servers.vllm``, eager, a shipped Gemma2 checkpoint with one full and one sliding group, prefix caching on
as vLLM's default) is driven with a workload that exercises the manager, with coverage in every one of its Python
processes (``COVERAGE_PROCESS_START``: the ``a1_coverage.pth`` that coverage installs starts it at interpreter
start-up; vLLM's engine core is such a process). Then the suites run in process under coverage. Per file, the ratio
is the lines both ran over the lines the server ran, counted in statements as coverage's report counts them (a data
file's continuation and decorator lines mapped to their statement's first line); every line the server ran that the
suites did not is named, grouped into ranges by function. The workload (``drive``): the cache-hit protocol of the server suites on a tight
pool (shared prefixes, conversations, long prompts, window-edge prompts; warm-up, reuse, a prefix-cache reset and a
fresh replay per request, so blocks are evicted and handed out again and requests preempted), decodes several
windows past their prompt, and streamed requests the client drops (aborted while running).
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.common import markdown_table, write_section
from bench.coverage_common import body_lines, lines_ran, pct, statement_lines, statements_ran, uncovered_ranges

FILES = ("kv_cache_manager.py", "single_type_kv_cache_manager.py", "kv_cache_coordinator.py", "block_pool.py")
PACKAGE = "vllm/v1/core"
SUITES = (
    "suites/vllm/test_kv_cache_manager.py",
    "suites/vllm/test_cache_hits.py",
    "suites/vllm/test_block_table.py",
)  # not test_fault_catalog.py: it patches vLLM's functions and restores them, running none of them
# The tests issue 56 added for what the server runs and the suites above did not: measured apart, so the table shows
# the suites before them and with them.
ADDED = ("suites/vllm/test_scheduler_queries.py",)
REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "reports" / "vllm-coverage.json"
SERVER_DATA = REPO / "reports" / ".vllm-coverage-server"
SUITES_DATA = REPO / "reports" / ".vllm-coverage-suites"
ADDED_DATA = REPO / "reports" / ".vllm-coverage-added"
CHECKPOINT = REPO / "fixtures" / "models" / "gemma2-tiny-swa"
SERVED = "swa-harness"
BLOCK = 32  # the CPU build's smallest block
# The server suite's tight Gemma2 pool: blocks for about one 320-token request, so 16 concurrent ones wait, are
# preempted and recomputed, and freed blocks are handed out again (suites/servers/test_vllm_server.py).
FLAGS = (
    "--dtype",
    "float32",
    "--block-size",
    str(BLOCK),
    "--num-gpu-blocks-override",
    "24",
    "--max-model-len",
    "320",
    # Without it the API server SIGKILLs its engine core at once when stopped (vLLM's default shutdown timeout is 0),
    # and the engine core, where the manager runs, never saves its coverage data.
    "--shutdown-timeout",
    "30",
)
NEW_TOKENS = 48  # the protocol's answers: three windows of 16, past a block boundary
LONG_DECODE = 240  # prompts of 14-56 tokens decoded under the 320-token limit: 15 windows, 8 blocks past them
DROPPED = 4  # streamed requests the client drops after their first tokens


def core_dir() -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("vllm is not installed here: run this in the venv of `nox -s vllm`")
    return Path(next(iter(spec.submodule_search_locations))) / "v1" / "core"


def rcfile(folder: Path, core: Path) -> Path:
    """The coverage configuration every server process starts with: each process its own data file (``parallel``),
    saved at a SIGTERM (the harness stops a server's process group so) and at ``os._exit`` (how a forked
    multiprocessing child ends), in a forked child too."""
    rc = folder / "coveragerc"
    include = "".join(f"\n    {core / name}" for name in FILES)
    rc.write_text(
        f"[run]\ndata_file = {folder / '.coverage'}\nparallel = true\nsigterm = true\n"
        f"patch =\n    fork\n    _exit\ninclude ={include}\n"
    )
    return rc


@dataclass(frozen=True)
class Drive:
    """What the workload did, as the server counted it: a run whose pool saw no pressure measures nothing useful."""

    requests: int  # completed (vllm:request_success_total): the dropped streams are not among them
    preemptions: float
    prefix_cache_hit_tokens: float
    kv_blocks_reallocated: float
    wall_s: float


def drive(server: object, kind: object) -> Drive:
    """The workload (module docstring) against a running server."""
    from suites.servers.cache_hits import lm_eval_workload, run_protocol, serve_concurrently

    start = time.perf_counter()
    workload = lm_eval_workload().with_edges(CHECKPOINT, BLOCK)
    run = run_protocol(kind, server, SERVED, workload, NEW_TOKENS)
    shorts = [" ".join(["Question: what is two plus two?"] * (i + 1)) for i in range(4)]
    long = serve_concurrently(server, SERVED, shorts, LONG_DECODE, None)
    with ThreadPoolExecutor(DROPPED) as pool:
        list(pool.map(lambda i: drop_after_first_tokens(server, f"Answer: {i} and {i}"), range(DROPPED)))
    idle(server.base_url)
    stats = kind.stats(server.base_url)
    assert len(long) == len(shorts) and run.prompts, "the drive sent nothing"
    return Drive(
        stats.get("requests", 0),
        stats.get("preemptions", 0.0),
        stats.get("prefix_cache_hit_tokens", 0.0),
        stats.get("kv_blocks_reallocated", 0.0),
        time.perf_counter() - start,
    )


def drop_after_first_tokens(server: object, prompt: str) -> None:
    """A streamed request the client closes after its first chunk: vLLM aborts it while it holds blocks."""
    host, port = server.base_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    body = {"model": SERVED, "prompt": prompt, "max_tokens": 200, "ignore_eos": True, "stream": True}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.readline()
    conn.close()


def idle(base_url: str, timeout: float = 120.0) -> None:
    """Wait until the server runs and queues no request (its own gauges): the dropped streams' aborts are done."""
    from harness.servers.counters import metrics_stats

    gauges = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting"}
    deadline = time.monotonic() + timeout
    while any(metrics_stats(base_url, gauges).values()):
        if time.monotonic() > deadline:
            raise SystemExit(f"the server still ran requests {timeout:g} s after the last answer")
        time.sleep(0.5)


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, exited but not yet reaped, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def stop_engine_core(pid: int, timeout: float = 120.0) -> None:
    """SIGTERM to the engine core alone, and wait until it has exited, before the server is stopped.

    Stopping the server signals its whole process group at once: the API server exits within a second, and the
    harness's guard then ends what is left of the tree. By then the engine core's shutdown has reset its SIGTERM
    handler to the default (``run_engine_core``'s ``finally``) and is waiting for its worker to exit
    (``VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS``, 5 s), so the guard's SIGTERM kills it before its exit saves the
    coverage data (the run of 2026-12-06 15:16 lost it so). Signalled alone, it drains, stops its worker and exits
    through multiprocessing's exit, which coverage's ``_exit`` patch saves on."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while running(pid):
        if time.monotonic() > deadline:
            raise SystemExit(f"the engine core ({pid}) still ran {timeout:g} s after its SIGTERM")
        time.sleep(0.2)


def measure_server(core: Path, folder: Path) -> Drive:
    """Start the server with coverage in its processes, drive it, stop it; what the drive did."""
    from harness.servers.base import ServerSpec
    from harness.servers.vllm import VLLMServer
    from suites.servers.oracles import free_port

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    kind = VLLMServer()
    spec = ServerSpec(
        model=str(CHECKPOINT),
        served_name=SERVED,
        graphs="off",
        flags=FLAGS,
        port=free_port(),
        env={"COVERAGE_PROCESS_START": str(rcfile(folder, core))},
    )
    server = kind.start(spec, log_path=folder / "server.log", timeout=900)
    cores: set[str] = set()
    try:
        done = drive(server, kind)
        cores = set(re.findall(r"EngineCore pid=(\d+)", (folder / "server.log").read_text()))
        for pid in sorted(cores):
            stop_engine_core(int(pid))
    finally:
        server.stop()
    lost = [pid for pid in sorted(cores) if not list(folder.glob(f".coverage.*.pid{pid}.*"))]
    if not cores or lost:
        raise SystemExit(f"the engine core ({', '.join(lost) or 'not in the log'}) saved no coverage data: {folder}")
    return done


def measure_suites(core: Path, data: Path, suites: tuple[str, ...]) -> float:
    """``suites`` in one process under coverage; their wall time. A failing suite is an error, not a number."""
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "coverage",
            "run",
            f"--include={','.join(str(core / name) for name in FILES)}",
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *suites,
        ],
        env={**os.environ, "COVERAGE_FILE": str(data)},
        cwd=REPO,
    )
    if done.returncode != 0:
        raise SystemExit(f"the suites failed (exit {done.returncode}): no coverage is reported for a red run")
    return time.perf_counter() - start


def ran(core: Path, data_files: list[Path]) -> dict[str, set[int]]:
    """The statements of each file that any of ``data_files`` ran (``coverage_common.statements_ran``: a data file's
    raw lines, continuation and decorator lines among them, mapped to their statements)."""
    lines = lines_ran(data_files, PACKAGE, FILES)
    return {name: statements_ran(core / name, lines[name]) for name in FILES}


def rows(
    core: Path,
    server: dict[str, set[int]],
    before: dict[str, set[int]],
    after: dict[str, set[int]],
    every: dict[str, set[int]],
) -> list[dict]:
    """Per file: the lines the server ran, those of them the suites ran before the added tests and with them, the
    rest as ranges by function, and the suites' coverage of the whole file (with the added tests)."""
    out = []
    for name in FILES:
        ran, both = server[name], server[name] & after[name]
        called = body_lines(core / name)
        out.append(
            {
                "file": name,
                "server_ran": len(ran),
                "server_ran_in_functions": len(ran & called),
                "both_ran_in_functions": len(both & called),
                "both_ran_before": len(ran & before[name]),
                "both_ran": len(both),
                "statements": len(every[name]),
                "suites_ran_before": len(before[name] & every[name]),
                "suites_ran": len(after[name] & every[name]),
                "server_only": sorted(ran - both),
                "server_only_ranges": uncovered_ranges(core / name, ran - both),
                "suites_only": len(after[name] - ran),
            }
        )
    return out


def main(argv: list[str] | None = None) -> None:
    import vllm

    parser = argparse.ArgumentParser(prog="python -m bench.vllm_coverage", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--run",
        nargs="*",
        choices=("server", "suites", "added"),
        default=["server", "suites", "added"],
        help="what to measure again (default all; none: recount the data files the last run left in reports/)",
    )
    args = parser.parse_args(argv)
    core = core_dir()
    SUITES_DATA.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(OUT.read_text()) if OUT.is_file() else {}
    drive_facts = measure_server(core, SERVER_DATA).__dict__ if "server" in args.run else previous.get("drive")
    walls = previous.get("suites_wall_s") or {}
    for part, data, suites in (("suites", SUITES_DATA, SUITES), ("added", ADDED_DATA, ADDED)):
        if part in args.run:
            walls[part] = measure_suites(core, data, suites)
    server = ran(core, [*SERVER_DATA.glob(".coverage.*")])
    before = ran(core, [SUITES_DATA])
    added = ran(core, [ADDED_DATA])
    after = {name: before[name] | added[name] for name in FILES}
    table = rows(core, server, before, after, {name: statement_lines(core / name) for name in FILES})
    suites_wall = sum(walls.values())
    OUT.write_text(
        json.dumps(
            {
                "vllm": vllm.__version__,
                "suites": SUITES,
                "added": ADDED,
                "drive": drive_facts,
                "suites_wall_s": walls,
                "files": table,
            },
            indent=1,
        )
        + "\n"
    )

    def total(key: str) -> int:
        return sum(r[key] for r in table)

    body = markdown_table(
        (
            "file (vllm/v1/core/)",
            "lines the server ran",
            "of them the suites ran, before",
            "with the added tests",
            "of the server's lines inside functions, with them",
            "the suites over the whole file, before → with them",
        ),
        [
            (
                f"`{r['file']}`",
                r["server_ran"],
                pct(r["both_ran_before"], r["server_ran"]),
                pct(r["both_ran"], r["server_ran"]),
                pct(r["both_ran_in_functions"], r["server_ran_in_functions"]),
                pct(r["suites_ran_before"], r["statements"]) + " → " + pct(r["suites_ran"], r["statements"]),
            )
            for r in table
        ]
        + [
            (
                "all four",
                total("server_ran"),
                pct(total("both_ran_before"), total("server_ran")),
                pct(total("both_ran"), total("server_ran")),
                pct(total("both_ran_in_functions"), total("server_ran_in_functions")),
                pct(total("suites_ran_before"), total("statements"))
                + " → "
                + pct(total("suites_ran"), total("statements")),
            )
        ],
    )
    facts = (
        f"{drive_facts['requests']} requests completed in {drive_facts['wall_s']:.0f} s: {drive_facts['preemptions']:.0f} "
        f"preemptions, {drive_facts['prefix_cache_hit_tokens']:.0f} prompt tokens from the prefix cache, "
        f"{drive_facts['kv_blocks_reallocated']:.0f} blocks handed out again"
        if drive_facts
        else "—"
    )
    write_section(
        "vllm-coverage",
        f"vLLM {vllm.__version__}'s KV-cache manager: the suites' lines over a CPU server's (coverage)",
        "python -m bench.vllm_coverage",
        f"A vLLM CPU server (eager, `{CHECKPOINT.name}`, {' '.join(FLAGS)}) with coverage in its every process, "
        f"driven by the cache-hit protocol, decodes to the length limit and dropped streams ({facts}); then "
        f"{', '.join(SUITES)} in one process under coverage, and apart the tests issue 56 added ({', '.join(ADDED)}), "
        f"{suites_wall:.0f} s in all. Per file: the lines the server ran (statements, as coverage's report counts them), and the share of "
        f"them the suites ran too, before the added tests and with them (the lines import runs, `def` and class lines, count in both; the "
        f"next column leaves them out); the last column is the suites over every statement. The "
        f"server's lines the suites miss, by function, and why: docs/VLLM_MEMORY_COVERAGE.md; the numbers: "
        f"`reports/vllm-coverage.json`.\n\n{body}",
    )
    print(body)
    for r in table:
        print(f"{r['file']}: the server ran, the suites did not:", *r["server_only_ranges"], sep="\n  ")


if __name__ == "__main__":
    main()
