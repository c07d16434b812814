"""Timing and reporting helpers for the benchmarks: interleaved medians, sections in docs/BENCHMARKS.md."""

from __future__ import annotations

import platform
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"


def interleaved_medians(fns: dict[str, Callable[[], object]], *, repeats: int, warmup: int = 3) -> dict[str, float]:
    """Median seconds per call of each function, calls interleaved so machine noise hits all alike."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(s) for name, s in samples.items()}


def machine_line() -> str:
    threads = torch.get_num_threads()
    return f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {threads} threads, Python {sys.version.split()[0]}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_section(key: str, title: str, command: str, body: str) -> None:
    """Replace (or append) the section ``key`` of docs/BENCHMARKS.md."""
    BENCHMARKS_MD.parent.mkdir(parents=True, exist_ok=True)
    text = (
        BENCHMARKS_MD.read_text()
        if BENCHMARKS_MD.exists()
        else "# Benchmarks\n\nEvery number here was written by the command above it.\n"
    )
    section = (
        f"<!-- bench:{key} -->\n## {title}\n\nCommand: `{command}`  \nMachine: {machine_line()}\n\n{body.strip()}\n"
        f"<!-- /bench:{key} -->"
    )
    pattern = re.compile(rf"<!-- bench:{re.escape(key)} -->.*?<!-- /bench:{re.escape(key)} -->", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + "\n\n" + section + "\n"
    BENCHMARKS_MD.write_text(text)
