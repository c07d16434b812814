"""The mutation run's parts on a toy module: which function a mutant is in, the import of mutated text, the sample,
shards merged back into one run, and the score."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from harness.kill_record import Failure
from harness.mutants import activate, swap
from harness.mutants.generate import Mutant, draw, mutants_of, mutated_source, with_after
from harness.jobs.merge import MergeError, merge_mutation_runs
from harness.mutants.record import MutantResult, MutationRun, load, save
from harness.mutants.scope import ScopeFile
from harness.mutants.survivors import Classified, score
from harness.shards import Shard

TOY = textwrap.dedent(
    """\
    LIMIT = 4


    class Pool:
        size = 8

        def free(self, n):
            def clamp(k):
                return k if k < LIMIT else LIMIT
            return clamp(n) + 1


    def window(start, length):
        return start - length
    """
)


def test_each_mutant_is_placed_in_the_frame_test_impact_records() -> None:
    mutants = mutants_of(ScopeFile("toy"), source=TOY)
    where = {(m.line, m.operator): m.function for m in mutants}
    assert where[1, "NumberReplacer"] == "toy.<module>"
    assert where[5, "NumberReplacer"] == "toy.Pool"  # a class body runs as its own frame, at import
    assert where[9, "ReplaceComparisonOperator_Lt_LtE"] == "toy.Pool.free.<locals>.clamp"
    assert where[10, "ReplaceBinaryOperator_Add_Sub"] == "toy.Pool.free"
    assert where[14, "ReplaceBinaryOperator_Sub_Add"] == "toy.window"
    only = mutants_of(ScopeFile("toy", only=("Pool.free",)), source=TOY)
    assert only and {m.function for m in only} == {"toy.Pool.free", "toy.Pool.free.<locals>.clamp"}


def test_a_mutant_changes_one_line_and_says_how() -> None:
    m = next(m for m in mutants_of(ScopeFile("toy"), source=TOY) if m.operator == "ReplaceBinaryOperator_Sub_Add")
    shown = with_after(m, TOY)
    assert shown.before.strip() == "return start - length" and shown.after.strip() == "return start + length"
    changed = [
        a for a, b in zip(TOY.splitlines(), mutated_source(TOY, m.operator, m.occurrence).splitlines()) if a != b
    ]
    assert changed == ["    return start - length"]


def test_the_mutated_text_is_what_the_process_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "toy_mut.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    m = next(m for m in mutants_of(ScopeFile("toy_mut"), source=TOY) if m.operator == "ReplaceBinaryOperator_Sub_Add")
    finder = activate.install("toy_mut", mutated_source(TOY, m.operator, m.occurrence))
    try:
        toy = importlib.import_module("toy_mut")
        assert toy.window(10, 3) == 13 and finder.loaded  # the installed file says 7
        assert toy.__file__ == str(tmp_path / "toy_mut.py")  # tracebacks and test impact see the real file
        with pytest.raises(RuntimeError, match="imported before"):
            activate.install("toy_mut", TOY)
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("toy_mut", None)


def _mutants(n: int) -> list[Mutant]:
    return [Mutant(f"toy:{i}:AddNot:{i}", "toy", i, "AddNot", i, "toy.f", "x", "not x") for i in range(n)]


def test_the_sample_is_seeded_and_independent_of_listing_order() -> None:
    pool = _mutants(40)
    assert draw(pool, 10, seed=3) == draw(list(reversed(pool)), 10, seed=3)
    assert draw(pool, 10, seed=3) != draw(pool, 10, seed=4)
    assert len(draw(pool, 0, seed=3)) == 40


def _run(results: list[MutantResult], shard: str = "1/1") -> MutationRun:
    return MutationRun(
        target="sglang",
        engine_version="0.5.23",
        source_digest="d",
        mutator="cosmic-ray 8.7.0",
        operators=("AddNot",),
        population=40,
        sample=12,
        seed=0,
        shard=shard,
        generated_at="2026-12-05T00:00:00+00:00",
        wall_s=10.0,
        recording_s=2.0,
        jobs=2,
        results=tuple(results),
    )


def _results() -> list[MutantResult]:
    statuses = ["killed", "survived", "error", "unreached", "timeout", "killed"]
    return [
        MutantResult(
            m,
            statuses[i % len(statuses)],  # type: ignore[arg-type]
            kill_class="behavioural" if statuses[i % len(statuses)] == "killed" else None,
            failure=Failure("suites/x.py::t", "x.py:1", "assert 1 == 2") if i % 3 == 0 else None,
        )
        for i, m in enumerate(draw(_mutants(40), 12, seed=0))
    ]


def test_shards_merge_into_the_run_one_machine_makes(tmp_path: Path) -> None:
    whole = _run(_results())
    shards = []
    for k in (1, 2, 3):
        part = Shard(k, 3)
        shard_run = _run([r for r in whole.results if part.holds(r.mutant.id)], shard=str(part))
        save(shard_run, tmp_path / f"s{k}.json")
        shards.append(load(tmp_path / f"s{k}.json"))
    merged = merge_mutation_runs({f"s{k}.json": run for k, run in enumerate(shards, 1)})
    assert [r.mutant.id for r in merged.results] == [r.mutant.id for r in whole.results]
    for a, b in zip(merged.results, whole.results):
        assert a == b, a.mutant.id  # cell by cell
    assert dataclasses.replace(merged, results=()) == dataclasses.replace(whole, results=())


def test_merge_refuses_shards_of_different_runs() -> None:
    a = _run(_results()[:3], shard="1/2")
    b = dataclasses.replace(_run(_results()[3:], shard="2/2"), source_digest="other")
    with pytest.raises(MergeError, match="field source_digest differs"):
        merge_mutation_runs({"a": a, "b": b})
    with pytest.raises(MergeError, match="are both shard 1/2"):
        merge_mutation_runs({"a": dataclasses.replace(a, results=()), "b": dataclasses.replace(a, results=())})


def test_the_score_drops_only_equivalent_mutants_from_the_count() -> None:
    run = _run(_results())
    survivor = next(r.mutant.id for r in run.results if r.status == "survived")
    unreached = next(r.mutant.id for r in run.results if r.status == "unreached")
    table = {survivor: Classified("equivalent", "x is never read"), unreached: Classified("gpu-only", "CUDA path")}
    s = score(run, table)
    killed = sum(r.status == "killed" for r in run.results)
    assert (s.killed, s.counted, s.equivalent) == (killed, len(run.results) - 1, 1)
    assert s.unclassified == sum(r.status in ("survived", "unreached") for r in run.results) - 2


def test_the_ceiling_counts_as_killable_only_open_gaps_and_unclassified_mutants() -> None:
    """A survivor classified gap-open could still be killed by a test, an unclassified one might be; an error, a
    GPU-only or an equivalent mutant cannot, so the ceiling leaves them out."""
    run = _run(_results())
    survivors = [r.mutant.id for r in run.results if r.status in ("survived", "unreached")]
    gpu, gap, *rest = survivors
    s = score(run, {gpu: Classified("gpu-only", "CUDA path"), gap: Classified("gap-open", "needs a test")})
    assert (s.gaps, s.unclassified) == (1, len(rest))
    assert s.ceiling == pytest.approx((s.killed + 1 + len(rest)) / len(run.results))
    assert s.ceiling < 1.0 and f"at most {s.ceiling:.1%} with every open gap closed" in s.describe()


def test_swa_harness_merge_takes_mutation_shards_and_refuses_a_stray_mutant(tmp_path: Path) -> None:
    from harness.jobs.merge import merge_files

    whole = _run(_results())
    paths = []
    for k in (1, 2):
        part = Shard(k, 2)
        save(_run([r for r in whole.results if part.holds(r.mutant.id)], shard=str(part)), tmp_path / f"{k}.json")
        paths.append(tmp_path / f"{k}.json")
    said = merge_files(paths, tmp_path / "merged.json")
    assert "mutation run: 12 mutants" in said and load(tmp_path / "merged.json").results == whole.results
    stray = _run(list(whole.results), shard="1/2")  # holds the other shard's mutants too
    save(stray, tmp_path / "1.json")
    with pytest.raises(MergeError, match="which the hash gives to other shards"):
        merge_files(paths, tmp_path / "merged.json")


def _import_toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    """TOY imported as a module of its own (the caller drops it from ``sys.modules``)."""
    (tmp_path / f"{name}.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


def test_the_recorder_credits_each_line_a_test_ran_and_no_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.faults.impact import Recorder

    toy = _import_toy(tmp_path, monkeypatch, "toy_lines")
    recorder, tests = Recorder({}, [toy.__file__]), {}
    before = sys.gettrace()
    try:
        with recorder.scope(tests, "window only"):
            sys.settrace(recorder.trace)
            toy.window(5, 2)
            sys.settrace(before)
        with recorder.scope(tests, "free"):
            sys.settrace(recorder.trace)
            toy.Pool().free(9)
            sys.settrace(before)
    finally:
        sys.settrace(before)
        sys.modules.pop("toy_lines", None)
    assert tests["window only"] == {"0:14"}
    assert {"0:8", "0:9", "0:10"} <= tests["free"] and "0:14" not in tests["free"]


def test_a_stopped_run_keeps_each_finished_mutant_for_the_next(tmp_path: Path) -> None:
    from harness.jobs.mutants import _Partial

    path, head = tmp_path / "m.partial.jsonl", {"target": "sglang", "source_digest": "d", "sample": 12, "seed": 0}
    first = _Partial(path, head)
    for result in _results()[:3]:
        first.keep(result)
    with path.open("a") as out:
        out.write('{"id": "cut short')  # the line the stopped run was writing
    again = _Partial(path, head)
    assert list(again.done.values()) == _results()[:3]
    assert not _Partial(path, {**head, "seed": 1}).done  # another sample: nothing taken from it


def test_a_test_that_only_started_a_process_does_not_reach_a_mutant(tmp_path: Path) -> None:
    """The mutant is imported in the pytest process only: a test credited with every line because it started a
    process (EVERY_FAULT) ran the engine where the mutant is not, so it never counts as reaching one."""
    from harness.faults.impact import EVERY_FAULT, Impact
    from harness.jobs.mutant_pytest import Recording

    impact = Impact("sglang", (("t::spawns", frozenset({EVERY_FAULT})), ("t::runs", frozenset({"0:5"}))), {})
    recording = Recording(
        impacts={"pool": impact}, outcomes={}, seconds=0.0, durations={}, line_files=(str(tmp_path / "m.py"),)
    )
    assert recording.running(tmp_path / "m.py", range(5, 6)) == ["t::runs"]
    assert recording.running(tmp_path / "m.py", range(6, 8)) == []


def _toy_mutant(old: str, new: str, source: str = TOY) -> str:
    assert source.count(old) == 1
    return source.replace(old, new)


@pytest.mark.parametrize(
    ("old", "new", "function"),
    [
        ("return start - length", "return start + length", "window"),
        ("return clamp(n) + 1", "return clamp(n) - 1", "Pool.free"),
        ("k < LIMIT", "k <= LIMIT", "Pool.free"),  # a nested function's change is its outermost function's
        ("LIMIT = 4", "LIMIT = 5", None),  # module level: ran at import
        ("size = 8", "size = 9", None),  # a class body: ran at import
        ("def window(start, length):", "def window(start, length=2):", None),  # a default: made when the def ran
        ("LIMIT = 4", "LIMIT = 4", None),  # compiles the same: nothing to swap
        ("def window(start, length):", "def window(start, +, length):", None),  # no longer compiles: a process says so
    ],
)
def test_a_mutant_is_swappable_only_where_every_change_lies_in_one_function_body(
    old: str, new: str, function: str | None
) -> None:
    assert swap.changed_function(TOY, _toy_mutant(old, new), "/x/toy.py") == function


def test_a_swapped_function_is_the_mutant_for_every_holder_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toy = _import_toy(tmp_path, monkeypatch, "toy_swap")
    try:
        held, pool = toy.window, toy.Pool()  # as `from toy import window` and a live instance hold them
        assert {f.__qualname__ for f in swap.functions_of(toy)} == {"window", "Pool.free"}  # clamp: made per call
        swap.swap_in(toy, _toy_mutant("return start - length", "return start + length"), "window")
        assert held(10, 3) == 13 and toy.window(10, 3) == 13  # the installed file says 7
        swap.swap_in(toy, _toy_mutant("return clamp(n) + 1", "return clamp(n) - 1"), "Pool.free")
        assert pool.free(2) == 1  # 3 as installed
        with pytest.raises(swap.SwapError, match="0 functions of that name"):
            swap.swap_in(toy, TOY, "Pool.size")
    finally:
        sys.modules.pop("toy_swap", None)


def test_the_plugin_swaps_a_mutant_into_an_imported_module_only_when_the_runner_names_its_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toy = _import_toy(tmp_path, monkeypatch, "toy_plug")
    mutated = _toy_mutant("return start - length", "return start + length")
    spec = tmp_path / "spec.json"
    monkeypatch.setenv(activate.MUTANT_ENV, str(spec))
    try:
        spec.write_text(json.dumps({"module": "toy_plug", "source": mutated, "function": None}))
        with pytest.raises(RuntimeError, match="imported before"):
            activate._from_env()
        assert toy.window(10, 3) == 7
        spec.write_text(json.dumps({"module": "toy_plug", "source": mutated, "function": "window"}))
        assert activate._from_env() is None and toy.window(10, 3) == 13
    finally:
        sys.modules.pop("toy_plug", None)
