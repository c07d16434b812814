"""A checkout of the installed SGLang for `swa-harness check --sglang <checkout>`, source written into it, and what
check said about it. Shared by ``bench.check_sglang_faults`` (catalog faults) and ``bench.check_mutants`` (mutants).

The checkout is ``<tmp>/python/sglang``, hard links to the installed files (``cp -al``): a file written into it is
replaced (a new file under the same name), never written through, or the installed SGLang would change with it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.paths import REPO


@contextlib.contextmanager
def installed_copy() -> Iterator[Path]:
    """The copy's import root (``<tmp>/python``, holding ``sglang/``), removed on exit."""
    spec = importlib.util.find_spec("sglang")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        raise LookupError("SGLang is not installed in this venv: `nox -s sglang --install-only` builds one")
    installed = Path(next(iter(spec.submodule_search_locations))).resolve()
    with tempfile.TemporaryDirectory(prefix="sglang-checkout-") as tmp:
        tree = Path(tmp) / "python"
        tree.mkdir()
        subprocess.run(["cp", "-al", str(installed), str(tree / "sglang")], check=True)
        shutil.rmtree(tree / "sglang" / "__pycache__", ignore_errors=True)
        yield tree


def replace_file(path: Path, text: str) -> None:
    """``path`` holds ``text`` now, as a new file: the one it was (maybe a hard link to the installed SGLang) is left
    as it is. Its cached bytecode goes too, so no run imports a stale one."""
    path.unlink()
    path.write_text(text)
    for cached in (path.parent / "__pycache__").glob(f"{path.stem}.*.pyc"):
        cached.unlink()


def put_back(originals: dict[Path, str]) -> None:
    for path, text in originals.items():
        replace_file(path, text)


@dataclass(frozen=True)
class CheckRun:
    """One `swa-harness check --sglang <copy> --no-server` and what it printed, read back from its lines."""

    rc: int
    output: str
    wall_s: float

    @property
    def verdict(self) -> str:
        return {0: "PASS", 1: "FAIL"}.get(self.rc, "NO VERDICT")

    def failing_test(self) -> str | None:
        """The test that failed (a kill) or errored, its node id without its folders."""
        failed = re.search(r"^FAIL (.+?)(?: \[[^\]]*\])?$", self.output, re.M)
        errored = re.search(r"^NO VERDICT: ([^\s(]\S*)", self.output, re.M)  # "(stage ...)": no test was named
        found = failed or errored
        return found.group(1).split("/")[-1] if found else None

    def first_failure(self) -> tuple[str, float] | None:
        """The stage that failed or errored, and the seconds from the suites' start to it (as check prints them)."""
        at = re.search(r"(\w+): (?:FAILED|errored) after \d+ tests, ([\d.]+) s after the suites started", self.output)
        return (at.group(1), float(at.group(2))) if at else None

    def named(self) -> tuple[str, str] | None:
        """The catalog fault check named and how (the same test killed it, or another test's message)."""
        like = re.search(
            r"looks like catalog fault (\S+) \(.*?\): (the same test killed it|the closest [^,]*)", self.output
        )
        return (like.group(1), like.group(2)) if like else None

    def says(self) -> str:
        """What check said the failure looks like, in a table cell."""
        if named := self.named():
            score = re.search(r"message similarity ([\d.]+)", self.output)
            return f"{named[0]} ({named[1]}, {score.group(1) if score else '?'})"
        none = re.search(
            r"no catalog fault matches .*?: nearest (\S+) \(.*?\) at ([\d.]+), (.*? killed it)", self.output
        )
        if none:
            return f"no catalog fault matches (nearest {none.group(1)} at {none.group(2)}, {none.group(3)})"
        why = re.search(r"^NO VERDICT: .*?errored, not a suite assertion: (.+)$", self.output, re.M)
        return f"no verdict: {why.group(1)[:120]}" if why else ""


def run_check(tree: Path, timeout_s: float = 3600) -> CheckRun:
    """`swa-harness check --sglang <tree> --no-server`, with this venv's python."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "check", "--sglang", str(tree.parent), "--no-server"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return CheckRun(proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - start)
