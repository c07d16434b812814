"""The fault-demo arm's launcher puts the catalog fault into every process of the server.

SGLang starts its scheduler (model runner, KV pools, CUDA graph runner) with multiprocessing in spawn
mode; ``python -m harness.servers.sglang_server.patched_server --self-check`` applies the fault, spawns a child the
same way, and compares the edited functions' code in both processes (CPU, SGLang target's install).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.jobs.nightly import DEFAULT_FAULT
from harness.paths import REPO


@pytest.mark.extended  # two SGLang imports in fresh processes (120 s on 2 loaded cores): the full nox -s sglang
def test_spawned_children_get_the_fault(target):
    if target.name != "sglang":
        pytest.skip("patches real SGLang: run with --target sglang (nox -s sglang)")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.servers.sglang_server.patched_server",
            "--fault",
            DEFAULT_FAULT,
            "--self-check",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert report["ok"] and report["child"] == report["patched"] != report["clean"]
