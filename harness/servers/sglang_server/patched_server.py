"""Launch an SGLang server with the harness's patches in every one of its processes: on CPU the import-only
stand-ins SGLang's CPU server needs (``shims/``), and optionally one SGLang-side catalog fault.

    [SGLANG_USE_CPU_ENGINE=1] python -m harness.servers.sglang_server.patched_server [--fault <id>] -- <sglang.launch_server flags>

A catalog fault (``harness/targets/sglang/faults/catalog``) swaps the ``__code__`` of SGLang functions
in the process that applies it. SGLang's server is several processes: the launcher (HTTP, tokenizer)
starts the scheduler (model runner, KV pools, CUDA graph runner) and the detokenizer with
``multiprocessing`` in *spawn* mode, so a patch applied only in the launcher would never reach the
scheduler, where the regressions live. Spawn re-imports the parent's main module in each child, by
name, as ``__mp_main__``; this module is that main module, and at import under that name it installs
the CPU stand-ins (when ``SGLANG_USE_CPU_ENGINE=1``) and applies the fault named by
``SWA_HARNESS_SGLANG_FAULT`` (which the launcher sets, so every child inherits it) before the child
unpickles its target. The launcher then runs SGLang's own
``sglang.launch_server`` main block in-process (``runpy``, without replacing ``__main__``, so the
children still re-import this module).

``--self-check`` proves the mechanism without a GPU: it applies the fault, starts one spawn child
the way SGLang does, and compares the fingerprints of the patched functions in both processes.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import multiprocessing
import os
import runpy
import sys
from pathlib import Path
from typing import Any

from harness.env import SGLANG_FAULT_ENV as FAULT_ENV
from harness.env import SGLANG_PATCH_ENV as PATCH_ENV

CPU_ENGINE_VAR = "SGLANG_USE_CPU_ENGINE"  # SGLang's own switch for its CPU code paths
STAND_INS = Path(__file__).resolve().parent / "shims"  # sgl_kernel: see shims/README.md


def install_cpu_stand_ins() -> None:
    """On SGLang's CPU engine: the import shims of the memory-level target (torchvision), the import-only
    ``sgl_kernel`` stand-in, first on sys.path (no CPU build of sgl_kernel exists), and the CPU-graph hooks
    ``torch_native`` lacks (``cpu_graph_hooks``)."""
    from harness.targets.sglang.imports import _install_shims

    _install_shims()
    if str(STAND_INS) not in sys.path:
        sys.path.insert(0, str(STAND_INS))
    from harness.servers.sglang_server import cpu_graph_hooks

    cpu_graph_hooks.install()


def prepare_process(*, spawned: bool) -> None:
    """What every process of the server needs before SGLang runs in it: the CPU stand-ins, an ad-hoc source patch
    (``SWA_HARNESS_SGLANG_PATCH``: e.g. a candidate fix for a finding), the fault, then the eviction ledger (counts
    what the radix cache evicts, ``eviction_ledger``); tracing first, when asked."""
    from harness.servers.sglang_server import trace

    trace.start_if_asked()  # SWA_HARNESS_SGLANG_TRACE=<folder>: which SGLang code this process runs
    if os.environ.get(CPU_ENGINE_VAR) == "1":
        install_cpu_stand_ins()
    if os.environ.get(PATCH_ENV):
        _import_sglang()
        from harness.targets.sglang.faults import apply_patch_file

        changed = apply_patch_file(os.environ[PATCH_ENV])
        print(
            f"patched_server: source patch {os.environ[PATCH_ENV]} applied ({changed} functions)",
            file=sys.stderr,
            flush=True,
        )
    if os.environ.get(FAULT_ENV):
        apply_fault(os.environ[FAULT_ENV])
    if spawned:  # the scheduler, where the cache lives; the launcher imports SGLang's metrics only once it set them up
        _import_sglang()
        from harness.servers.sglang_server import eviction_ledger

        eviction_ledger.install()  # after the fault and the patch: it wraps the code they leave (observation only)


def _import_sglang() -> None:
    from harness.targets.sglang.imports import import_sglang  # version check; import shims only on a CPU install

    import_sglang()


def apply_fault(fault_id: str) -> Any:
    """Apply catalog fault ``fault_id`` to this process's SGLang (for good: a server runs until it is killed)."""
    _import_sglang()
    from harness.targets.sglang.faults import apply
    from harness.targets.sglang.faults.by_id import get_fault

    fault = get_fault(fault_id)
    apply(fault)
    return fault


def _code_digest(code: Any) -> str:
    """What an edit changes: bytecode, names and constants (nested code objects by their own digest)."""
    parts = [code.co_code, repr(code.co_names).encode()]
    for const in code.co_consts:
        parts.append(_code_digest(const).encode() if inspect.iscode(const) else repr(const).encode())
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def fingerprints(fault_id: str) -> dict[str, str]:
    """Digest of the current code of every function the fault edits, in this process."""
    from harness.targets.sglang.faults import resolve
    from harness.targets.sglang.faults.by_id import get_fault

    out = {}
    for edit in get_fault(fault_id).edits:
        fn = resolve(edit.target)
        out[edit.target] = _code_digest(getattr(fn, "__func__", fn).__code__)
    return out


def _child_report(fault_id: str, queue: Any) -> None:
    queue.put(fingerprints(fault_id))


def self_check(fault_id: str, timeout: float = 300.0) -> dict[str, Any]:
    """Clean and patched fingerprints here, and those a spawned child sees; ``ok`` when the child is patched."""
    _import_sglang()
    clean = fingerprints(fault_id)
    os.environ[FAULT_ENV] = fault_id
    apply_fault(fault_id)
    patched = fingerprints(fault_id)
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_child_report, args=(fault_id, queue))
    child.start()
    try:
        in_child = queue.get(timeout=timeout)
    finally:
        child.join(timeout)
    ok = all(patched[t] != clean[t] and in_child.get(t) == patched[t] for t in clean)
    return {"fault": fault_id, "clean": clean, "patched": patched, "child": in_child, "ok": ok}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(
        prog="python -m harness.servers.sglang_server.patched_server",
        description="sglang.launch_server with the CPU stand-ins (SGLANG_USE_CPU_ENGINE=1) "
        "and/or a catalog fault in every process",
    )
    parser.add_argument("--fault", default=None, help="SGLang-side catalog fault id")
    parser.add_argument(
        "--self-check",
        action="store_true",
        help="check that a spawned child process gets the patch, print JSON, exit (no server)",
    )
    args = parser.parse_args(argv[:split])
    if args.self_check:
        if not args.fault:
            parser.error("--self-check needs --fault")
        import json

        report = self_check(args.fault)
        print(json.dumps(report, indent=1))
        return 0 if report["ok"] else 1
    if args.fault:
        os.environ[FAULT_ENV] = args.fault  # inherited by every process the server spawns
    prepare_process(spawned=False)
    if args.fault:
        print(f"patched_server: fault {args.fault} applied; children apply it at start-up", file=sys.stderr, flush=True)
    sys.argv = ["sglang.launch_server", *argv[split + 1 :]]
    runpy.run_module("sglang.launch_server", run_name="__main__")  # SGLang's own main block; never returns normally
    return 0


if __name__ == "__mp_main__":
    prepare_process(spawned=True)  # a process spawned by the server (scheduler, detokenizer, ...)

if __name__ == "__main__":
    sys.exit(main())
