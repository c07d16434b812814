"""The pieces of the check benches (``bench.check_mutants``, ``bench.check_sglang_faults``) that need no SGLang: which
mutants are drawn, how a file is written into a hard-linked copy, and how check's output is read back."""

from __future__ import annotations

import os
from pathlib import Path

from bench.check_mutants import outside_catalog
from bench.sglang_checkout import CheckRun, put_back, replace_file
from harness.mutants.generate import Mutant


def _mutant(function: str) -> Mutant:
    module = "sglang.srt.mem_cache.allocator.swa"
    return Mutant(f"{module}:1:AddNot:0", module, 1, "AddNot", 0, f"{module}.{function}", "if x:", "if not x:")


def test_mutants_inside_a_function_the_catalog_edits_are_left_out() -> None:
    edited = {"sglang.srt.mem_cache.allocator.swa.SWATokenToKVPoolAllocator.free_swa"}
    kept = outside_catalog(
        [
            _mutant("SWATokenToKVPoolAllocator.free_swa"),
            _mutant("SWATokenToKVPoolAllocator.free_swa.<locals>.inner"),
            _mutant("SWATokenToKVPoolAllocator.free_swa_pages"),  # another function: a name that only starts alike
            _mutant("SWATokenToKVPoolAllocator.alloc"),
        ],
        edited,
    )
    assert [m.function.rsplit(".", 1)[-1] for m in kept] == ["free_swa_pages", "alloc"]


def test_a_file_of_the_copy_is_replaced_never_written_through(tmp_path: Path) -> None:
    installed, copy = tmp_path / "installed.py", tmp_path / "copy" / "swa.py"
    installed.write_text("x = 1\n")
    copy.parent.mkdir()
    os.link(installed, copy)  # as cp -al makes the copy
    (copy.parent / "__pycache__").mkdir()
    (copy.parent / "__pycache__" / "swa.cpython-311.pyc").write_bytes(b"stale")
    replace_file(copy, "x = 2\n")
    assert installed.read_text() == "x = 1\n" and copy.read_text() == "x = 2\n"
    assert not (copy.parent / "__pycache__" / "swa.cpython-311.pyc").exists()
    put_back({copy: "x = 1\n"})
    assert copy.read_text() == "x = 1\n" and installed.stat().st_nlink == 1


FAILED = """check sglang: checkout /tmp/sglang-checkout-1/python
  killers: 13 tests passed in 30 s
  suites: FAILED after 120 tests, 52.3 s after the suites started

FAIL suites/prefix/test_prefix_cache_machine.py::test_prefix_cache_machine[page4-window6] [test_prefix_cache_machine.py:88]
  AssertionError: the SWA evictable size went negative
  no catalog fault matches (message similarity below 0.84): nearest sglang-x (#1) at 0.41, another test killed it; \
the same test killed sglang-y (#2) at 0.16
"""


def test_checks_output_is_read_back() -> None:
    run = CheckRun(1, FAILED, 60.0)
    assert run.verdict == "FAIL"
    assert run.failing_test() == "test_prefix_cache_machine.py::test_prefix_cache_machine[page4-window6]"
    assert run.first_failure() == ("suites", 52.3)
    assert run.named() is None
    assert run.says() == "no catalog fault matches (nearest sglang-x at 0.41, another test killed it)"
    named = FAILED.replace(
        FAILED.splitlines()[-1],
        "  looks like catalog fault sglang-y (#2): the same test killed it, message similarity 0.97 (a match is 0.84"
        " or more)",
    )
    assert CheckRun(1, named, 60.0).says() == "sglang-y (the same test killed it, 0.97)"
    errored = "  suites: errored after 3 tests, 9.0 s after the suites started\n\nNO VERDICT: suites/pool/t.py::test_a errored"
    run = CheckRun(2, errored, 10.0)
    assert (run.verdict, run.failing_test(), run.first_failure()) == ("NO VERDICT", "t.py::test_a", ("suites", 9.0))
    stage = "  suites: errored after 169 tests, 89.7 s after the suites started\n\nNO VERDICT: (stage suites) errored, "
    run = CheckRun(2, stage + "not a suite assertion: pytest exited 2: sys:1: a warning\n", 116.0)
    assert (run.failing_test(), run.says()) == (None, "no verdict: pytest exited 2: sys:1: a warning")
    assert CheckRun(0, "\nPASS: every stage passed in 90 s", 91.0).verdict == "PASS"


def test_a_stopped_runs_printed_lines_give_back_its_rows() -> None:
    """A mutant run stopped midway keeps what it measured: each ``==`` block of its log is read back as the check run
    it printed (verdict, stage and seconds to the first failure, the failing test), and the section says how many of
    the drawn mutants ran."""
    from bench.check_mutants import Tally, from_log

    module = "sglang.srt.mem_cache.allocator.swa"
    text = "def f(x):\n    if x:\n        return 1\n"
    drawn = [Mutant(f"{module}:2:AddNot:{i}", module, 2, "AddNot", 0, f"{module}.f", "", "") for i in range(3)]
    log = (
        "check sglang: checkout /tmp/x/python\n  killers: 16 tests passed in 49 s\n\nPASS: every stage passed in 161 s\n"
        f"\n== [1/3] {drawn[0].id}: FAIL in 40 s\ncheck sglang: checkout /tmp/x/python\n"
        "  killers: FAILED after 3 tests, 12.5 s after the suites started\n"
        "FAIL suites/sglang/test_pool.py::test_free [swa.py:2]\n"
        f"\n== [2/3] {drawn[1].id}: PASS in 150 s\ncheck sglang: checkout /tmp/x/python\n\nPASS: every stage passed\n"
    )
    tally = Tally(len(drawn), 0)
    from_log(log, drawn, tally, {module: text})
    assert tally.counts == {"PASS": 1, "FAIL": 1, "NO VERDICT": 0} and tally.slow == []
    assert [row[2:5] for row in tally.rows] == [
        ["FAIL", "killers, 12.5 s", "`test_pool.py::test_free`"],
        ["PASS", "150 s in all", ""],
    ]
    assert tally.rows[0][1] == "`-if x: / +if not x:`"
    assert "**2 of them run**" in tally.body() and "exit 0, 161 s" in tally.body()
