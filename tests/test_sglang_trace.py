"""Which SGLang code a traced server ran: per-process coverage data merged per file (harness/servers/sglang_server/trace)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.servers.sglang_server import trace

coverage = pytest.importorskip("coverage", reason="coverage is in the test extras")


def write_data(folder: Path, suffix: str, lines: dict[str, list[int]]) -> None:
    data = coverage.CoverageData(basename=str(folder / f".coverage.{suffix}"))
    data.add_lines(lines)
    data.write()


def test_processes_are_merged_per_file_and_only_sglang_files_count(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    pool = site / "sglang" / "srt" / "mem_cache" / "swa_memory_pool.py"
    launch = site / "sglang" / "launch_server.py"
    pool.parent.mkdir(parents=True)
    pool.write_text("import os\n\n\ndef alloc(n):\n    x = n\n    return x\n")  # lines 5-6: a function body
    launch.write_text("import sys\n")
    write_data(tmp_path, "launcher", {str(pool): [1, 4, 5], str(site / "torch" / "module.py"): [5]})
    write_data(tmp_path, "scheduler", {str(pool): [5, 6], str(launch): [1]})
    runs = trace.executed(tmp_path)
    assert runs == [trace.FileRun("launch_server.py", 1, 0), trace.FileRun("srt/mem_cache/swa_memory_pool.py", 4, 2)]
    table = trace.markdown(runs)
    assert "1 SGLang files had code run inside functions (2 lines); 1 more were only imported." in table
    assert "| `srt/mem_cache` | `swa_memory_pool.py` (2) |" in table and "launch_server" not in table


def test_a_folder_without_data_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert trace.main([str(tmp_path)]) == 2
    assert "no coverage data" in capsys.readouterr().err


def test_reading_a_data_file_its_process_is_still_creating_leaves_it_untouched(tmp_path: Path) -> None:
    """A traced process's first save creates its data file and then its tables; a read in between (the suites poll
    the folder while a server runs) found a file without tables, and coverage gave it a schema of its own, so the
    process's save failed ("table coverage_schema already exists") and its tracing thread died (seen in CI). A read
    works on a copy: the file is as the process left it, and nothing is read from it yet."""
    pytest.importorskip("coverage")
    half_made = tmp_path / ".coverage.vm.pid1.abc"
    half_made.write_bytes(b"")
    assert trace.executed(tmp_path) == []
    assert half_made.read_bytes() == b""


def test_a_traced_process_saves_while_it_runs_and_survives_sigkill(tmp_path: Path) -> None:
    """SGLang SIGKILLs its children: the periodic save is what keeps their data. A fake ``sglang`` package runs
    under tracing in a child that is then killed; its lines are in the folder."""
    pkg = tmp_path / "site" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "def work():\n    total = 0\n    for i in range(3):\n        total += i\n    return total\n"
    )
    script = textwrap.dedent(f"""
        import sys
        import time
        from harness.servers.sglang_server import trace
        trace.SAVE_EVERY_S = 0.1
        assert trace.start_if_asked()
        sys.path.insert(0, {str(tmp_path / "site")!r})
        import sglang
        sglang.work()
        print("worked", flush=True)
        time.sleep(60)
    """)
    env = {**os.environ, trace.TRACE_ENV: str(tmp_path / "trace"), "PYTHONPATH": str(Path.cwd())}
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "worked"
        deadline = time.monotonic() + 120  # a loaded 2-core machine: the first save can take tens of seconds
        while not trace_has_work(tmp_path / "trace") and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        child.kill()
        child.wait()
    (run,) = trace.executed(tmp_path / "trace")
    assert run.path == "__init__.py" and run.lines >= 4


def trace_has_work(folder: Path) -> bool:
    try:
        return any(r.lines >= 4 for r in trace.executed(folder))
    except Exception:  # a data file being written: not yet
        return False
