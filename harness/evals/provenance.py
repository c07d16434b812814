"""The provenance of an eval: enough to reproduce the run, or to see why two runs differ.

Grouped for the top of the report: the engine under test (this checkout's git sha and dirty flag,
or the version an external server reports, e.g. SGLang's), the model and its file hashes, each
arm's server command and environment, the hardware, the software versions and the dataset
hashes. Computed after the runs, so the server and lm-eval command lines are read from the logs
the runs wrote rather than reconstructed. Nothing here may fail the eval: unknowns say so.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import urllib.request
import uuid
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

from harness.evals.config import EvalConfig, ModeSpec
from harness.evals.fingerprint import git
from harness.evals.lmeval import OFFLINE_ENV
from harness.evals.paths import REPO, TASKS_DIR

DATA_DIR = REPO / "fixtures" / "data"
# Environment variables that change what an arm computes; secrets never enter the record.
_ENV_PREFIXES = ("SWA_HARNESS_", "OMP_", "MKL_", "CUDA_", "TORCH", "PYTORCH_", "HF_", "TOKENIZERS_", "SGLANG")
_SECRET = re.compile(r"(^|_)(TOKEN|KEY|SECRET|PASSWORD|PASS|AUTH|CREDENTIALS?)($|_)")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _git(*args: str, cwd: Path = REPO) -> str:
    try:
        if cwd == REPO:
            return git(*args, timeout=10).strip()
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def file_sha256(path: Path) -> str | None:
    """Hex digest of a file, read in chunks (checkpoints can be large); None when it is missing."""
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checkout_state(cwd: Path = REPO) -> dict[str, Any]:
    """A git checkout's full sha and whether tracked files have uncommitted changes."""
    sha = _git("rev-parse", "HEAD", cwd=cwd) or "unknown"
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no", cwd=cwd))
    return {"commit": sha, "dirty": dirty}


def server_version(base_url: str, timeout: float = 3.0) -> str:
    """What an external OpenAI-compatible server says it is: SGLang answers ``/get_server_info``."""
    for route, label in (("/get_server_info", "sglang"), ("/version", "")):
        try:
            with urllib.request.urlopen(base_url.rstrip("/") + route, timeout=timeout) as resp:
                version = json.loads(resp.read()).get("version")
        except (OSError, ValueError, AttributeError):
            continue
        if version:
            return f"{label} {version}".strip()
    return "unknown"


def _sglang_source() -> dict[str, Any]:
    """The SGLang under test when ``SWA_HARNESS_SGLANG`` names a release or a local checkout."""
    spec = os.environ.get("SWA_HARNESS_SGLANG")
    if not spec:
        return {}
    source: dict[str, Any] = {"spec": spec}
    if Path(spec).is_dir():
        source.update(checkout_state(Path(spec)))
    if os.environ.get("SWA_HARNESS_SGLANG_PATCH"):
        source["patch"] = os.environ["SWA_HARNESS_SGLANG_PATCH"]
    return {"sglang source": source}


def engine_under_test(config: EvalConfig) -> dict[str, Any]:
    """This checkout when the harness launched both servers, else what the external servers report."""
    harness = checkout_state()
    short = harness["commit"][:10] + (" (dirty)" if harness["dirty"] else "")
    external = {m.label: m.base_url for m in config.modes if m.base_url}
    if not external:
        return {"summary": f"harness {short}", "kind": "harness engine of this checkout", **harness}
    versions = {label: server_version(url) for label, url in external.items()}
    named = sorted({v for v in versions.values() if v != "unknown"})
    return {
        "summary": " / ".join(named) if named else "external server (version unknown)",
        "kind": "external server(s)",
        "servers": {label: f"{url} — {versions[label]}" for label, url in external.items()},
        "harness (orchestration)": f"{short}",
        **_sglang_source(),
    }


def model_provenance(model: Path) -> dict[str, Any]:
    """The checkpoint and the digests of the files that decide its answers."""
    files = {name: file_sha256(Path(model) / name) for name in ("model.safetensors", "config.json", "tokenizer.json")}
    return {"name": Path(model).name, "checkpoint": str(model),
            **{f"{name} sha256": digest or "n/a" for name, digest in files.items()}}


def _first_line(path: Path) -> str:
    """A log's first line without its ``$ ``: the command the run logged before starting it."""
    try:
        with open(path, encoding="utf-8") as fh:
            line = fh.readline().strip()
    except OSError:
        return "n/a (no log)"
    return line[2:] if line.startswith("$ ") else (line or "n/a (empty log)")


def relevant_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables of ``_ENV_PREFIXES`` set in ``environ``, secrets left out by name."""
    return {k: v for k, v in sorted(environ.items()) if k.startswith(_ENV_PREFIXES) and not _SECRET.search(k)}


def arm_provenance(config: EvalConfig, mode: ModeSpec) -> dict[str, Any]:
    """One arm: its graph mode and fault, the server's command line and environment, lm-eval's command."""
    logs = Path(config.out) / "logs"
    arm: dict[str, Any] = {"graphs": mode.graphs, "fault": mode.fault or "none"}
    if mode.base_url:
        arm["server"] = f"external: {mode.base_url}"
    else:
        arm["server command"] = _first_line(logs / f"server-{mode.label}.log")
        # run_mode layers exactly these over the parent's environment for the server it launches.
        arm["env"] = relevant_env({**os.environ, **OFFLINE_ENV, "SWA_HARNESS_FAULT": mode.fault or ""})
    arm["lm-eval command"] = _first_line(logs / f"lm_eval-{mode.label}.log")
    return arm


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 2**20:.0f} GiB"
    except (OSError, ValueError):
        pass
    return "unknown"


def hardware(device: str) -> dict[str, Any]:
    """This machine (the one that launched the servers); the GPU only when the eval ran on one."""
    info: dict[str, Any] = {"device": device, "cpu": _cpu_model(), "logical cores": os.cpu_count() or 0,
                            "memory": _memory(), "machine": platform.machine()}
    if device.startswith("cuda"):
        try:
            import torch  # imported here: only a GPU run needs it

            info["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cuda not available"
        except Exception as exc:  # noqa: BLE001 - provenance must not fail the run
            info["gpu"] = f"unknown ({type(exc).__name__})"
    return info


def dataset_hashes(suites: Iterable[str]) -> dict[str, dict[str, str]]:
    """sha256 (first 16 hex) of each suite's task YAML and data files: a changed set shows here."""
    out: dict[str, dict[str, str]] = {}
    for name in suites:
        files = [TASKS_DIR / f"{name}.yaml", TASKS_DIR / "utils.py", *sorted((DATA_DIR / name).glob("*.jsonl"))]
        out[name] = {f.name: (file_sha256(f) or "missing")[:16] for f in files if f.exists()}
    return out


def provenance(config: EvalConfig) -> dict[str, Any]:
    """The whole provenance record (saved as ``provenance.json``, kept in the history, shown on top)."""
    now = datetime.now(timezone.utc)
    return {
        "run": {
            "id": f"{now:%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:6]}",
            "recorded at": now.isoformat(timespec="seconds"),
            "command": "swa-harness eval " + " ".join(config.argv),
            "items": ", ".join(f"{k}={v}" for k, v in config.limits.items()),
            "decoding": "greedy (temperature 0), lm-eval seed 0",
            "lm-eval batch": f"{config.batch_size} prompts per request, no concurrency",
        },
        "engine under test": engine_under_test(config),
        "model": model_provenance(Path(config.model)),
        "arms": {mode.label: arm_provenance(config, mode) for mode in config.modes},
        "hardware": hardware(config.device),
        "software": {"python": platform.python_version(), "torch": _version("torch"), "lm-eval": _version("lm_eval"),
                     "platform": platform.platform()},
        "datasets": dataset_hashes(config.limits),
    }
