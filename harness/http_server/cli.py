"""``python -m harness.http_server``: serve one checkpoint over the OpenAI API until SIGINT/SIGTERM.

Once listening it prints exactly one line to stdout, ``SWA_HARNESS_SERVER_READY http://HOST:PORT``,
and flushes: the eval orchestrator (see launch.py) waits for that line. Everything else (logs,
tracebacks) goes to stderr. With ``--port 0`` the OS picks a free port and the line reports it.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from harness.engine import Engine, EngineConfig
from harness.engine.cpu_kernels import KERNEL_MODES
from harness.engine.model_runner import CAPTURE_MODES
from harness.env import SERVER_READY
from harness.faults import activate_from_env
from harness.http_server.app import build_app
from harness.http_server.worker import EngineWorker
from harness.reuse import server_build

logger = logging.getLogger("harness.http_server")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="swa-harness serve",
        description="Serve one checkpoint over the OpenAI API until SIGINT/SIGTERM (also: "
        "python -m harness.http_server). Once listening it prints one line to stdout, "
        f"'{SERVER_READY} http://HOST:PORT'; logs go to stderr.",
    )
    p.add_argument("--model", required=True, help="checkpoint directory (config.json, safetensors, tokenizer.json)")
    p.add_argument("--graphs", default="auto", choices=("off", "eager", "tape", "cuda", "auto"))
    p.add_argument(
        "--capture",
        default="startup",
        choices=CAPTURE_MODES,
        help="capture every graph at start-up (default, as SGLang) or each on the first batch that needs it",
    )
    p.add_argument(
        "--cpu-kernels",
        default="auto",
        choices=KERNEL_MODES,
        help="decode attention, gelu * up and RMSNorm as compiled CPU kernels (auto: where they build, "
        "fp32 on CPU), or torch ops",
    )
    p.add_argument(
        "--prefix-cache",
        default="on",
        choices=("on", "off"),
        help="reuse cached prompt prefixes (a radix cache with SWA tombstones; default on, as real servers)",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    p.add_argument("--max-running", type=int, default=32, help="max concurrently running requests (decode batch)")
    p.add_argument("--num-threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--max-context-len", type=int, default=None, help="default: the model's max_position_embeddings")
    # Pool sizes and pages, as SGLang's --max-total-tokens / --swa-full-tokens-ratio / --page-size: small pools make
    # the tree evict and tombstone and slots be reused while requests run (the stress arms and the cache-hit protocol).
    p.add_argument(
        "--full-pool-size", type=int, default=None, help="full-attention KV slots (default: sized to memory)"
    )
    p.add_argument("--swa-pool-size", type=int, default=None, help="sliding-window KV slots (default: from the full)")
    p.add_argument("--page-size", type=int, default=1, help="KV slots per page (default 1)")
    p.add_argument("--chunk-size", type=int, default=256, help="prefill tokens per request per step (default 256)")
    p.add_argument("--max-prefill-tokens", type=int, default=1024, help="prefill tokens per step (default 1024)")
    p.add_argument(
        "--schedule",
        default="sync",
        choices=("sync", "overlap"),
        help="overlap: schedule step n+1 while step n runs, as SGLang's overlap scheduler and vLLM's async "
        "scheduling (default sync; harness/engine/overlap.py)",
    )
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--served-model-name", default=None, help="the 'model' clients send (default: --model as given)")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument("--access-log", action="store_true", help="log every HTTP request to stderr")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not (Path(args.model) / "config.json").is_file():
        what = "no such folder" if not Path(args.model).exists() else "no config.json in it"
        print(f"swa-harness serve: --model {args.model}: not a checkpoint ({what})", file=sys.stderr)
        return 2
    try:
        config = EngineConfig(
            model_path=args.model,
            graphs=args.graphs,
            max_running_requests=args.max_running,
            num_threads=args.num_threads,
            max_context_len=args.max_context_len,
            dtype=args.dtype,
            device=args.device,
            capture=args.capture,
            cpu_kernels=args.cpu_kernels,
            prefix_cache=args.prefix_cache == "on",
            full_pool_size=args.full_pool_size,
            swa_pool_size=args.swa_pool_size,
            page_size=args.page_size,
            chunk_size=args.chunk_size,
            max_prefill_tokens=args.max_prefill_tokens,
            schedule=args.schedule,
        )
    except ValueError as exc:
        print(f"swa-harness serve: {exc}", file=sys.stderr)
        return 2
    fault = activate_from_env()  # SWA_HARNESS_FAULT=<id>: serve with one catalog fault injected
    if fault is not None:
        logger.warning("serving with fault %r injected (%s)", fault.id, fault.seed)
    worker = EngineWorker(lambda: Engine(config))
    try:
        worker.start()
        build = server_build(
            args.model,
            dtype=args.dtype,
            device=args.device,
            max_running=args.max_running,
            prefix_cache=args.prefix_cache,
            schedule=args.schedule,
            cpu_kernels=worker.engine.kernels.in_use,
            fault=fault.id if fault is not None else None,
        )
        app = build_app(worker, args.served_model_name or args.model, build=build)
    except (RuntimeError, ValueError) as exc:  # the engine could not be built from this checkpoint: bad input
        print(f"swa-harness serve: {exc}", file=sys.stderr)
        worker.stop()
        return 2
    logger.info(
        "engine ready: %s, graphs=%s, cpu kernels=%s, max_context_len=%d",
        args.model,
        worker.engine.graph_mode,
        worker.engine.kernels.in_use,
        worker.engine.max_context_len,
    )
    try:
        asyncio.run(serve(app, worker, args.host, args.port, access_log=args.access_log))
    except OSError as exc:  # e.g. the port is taken
        print(f"swa-harness serve: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    finally:
        worker.stop()
    return 0


async def serve(app: web.Application, worker: EngineWorker, host: str, port: int, *, access_log: bool = False) -> None:
    """Listen, print the ready line, and run until SIGINT or SIGTERM.

    ``handler_cancellation``: a client that disconnects cancels its handler, and with it its requests
    in the engine (aiohttp's default since 3.9 lets the handler run on).
    """
    runner = web.AppRunner(
        app,
        access_log=logging.getLogger("aiohttp.access") if access_log else None,
        shutdown_timeout=5.0,
        handler_cancellation=True,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        print(f"{SERVER_READY} {ready_url(runner.addresses[0])}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        requested: list[int] = []

        def on_signal(signum: int, frame: object) -> None:
            # The first SIGINT/SIGTERM starts the shutdown; SIGTERM is ignored from then on (SIGKILL still ends a
            # shutdown that hangs). A second one is on its way whenever the group and the guard both signal (the
            # guard forwards what it gets), and it must not turn a clean shutdown into exit 143. Not a handler that
            # stays: asyncio's (loop.add_signal_handler) is reset to the default action when its loop closes, and
            # Python's own at interpreter exit, both while the process is still ending; SIG_IGN is kept.
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if not requested:
                requested.append(signum)
                loop.call_soon_threadsafe(stop.set)

        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
        await stop.wait()
        logger.info("shutting down")
        await loop.run_in_executor(None, worker.stop)  # in-flight requests get 503 instead of waiting
    finally:
        await runner.cleanup()


def ready_url(sockname: tuple) -> str:
    """``http://IP:PORT`` a client can connect to: wildcard binds are reported as loopback."""
    ip, port = sockname[0], sockname[1]
    addr = ipaddress.ip_address(ip.split("%", 1)[0])
    if addr.is_unspecified:
        addr = ipaddress.ip_address("::1" if addr.version == 6 else "127.0.0.1")
    host = f"[{addr}]" if addr.version == 6 else str(addr)
    return f"http://{host}:{port}"
