"""The report's mutation-score section: every ``reports/mutants-*.json`` beside the kill matrices, read through
``harness.mutants.record`` (no cosmic-ray needed), shown per target with its score, counts, every mutant not killed
with its classification, the killed ones folded; a missing file shows nothing, a damaged one says so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.evals.compare import Thresholds, compare_runs, summarize
from harness.evals.results import RunRecord, RunResult
from harness.jobs.options import RunOptions
from harness.jobs.recording import SideInputs
from harness.kill_record import Failure
from harness.mutants import survivors
from harness.mutants.generate import Mutant
from harness.mutants.record import MutantResult, MutationRun, save
from harness.mutants.survivors import Classified, score
from harness.paths import REPO
from harness.report import render_html
from harness.report.inputs import load_mutation_runs
from harness.report.views import mutation_run_view
from tests.test_report import SCRIPT, _items, _parse

POOL = "sglang.srt.mem_cache.swa_memory_pool"
RADIX = "sglang.srt.mem_cache.unified_radix_cache"
EQUIVALENT_REASON = "the loop's bound is the list's length either way: range(n) and range(0, n) are one range"


def _mutant(module: str, line: int, operator: str, before: str, after: str) -> Mutant:
    return Mutant(
        id=f"{module}:{line}:{operator}:0",
        module=module,
        line=line,
        operator=operator,
        occurrence=0,
        function=f"{module}.SWAKVPool.free",
        before=before,
        after=after,
    )


def _result(mutant: Mutant, status: str, **extra) -> MutantResult:
    return MutantResult(mutant=mutant, status=status, tests_reaching=3, tests_run=3, seconds=2.5, **extra)


KILLER = Failure("suites/pool/test_ownership.py::test_free_returns_every_slot", "test_ownership.py:41", "assert 3 == 4")
CRASH = Failure("suites/pool/test_ownership.py::test_alloc", "swa_memory_pool.py:120", "IndexError: out of range")
EQUIVALENT = _mutant(POOL, 88, "NumberReplacer", "for i in range(0, n):", "for i in range(1 - 1, n):")
GAP = _mutant(RADIX, 301, "ReplaceComparisonOperator_Lt_LtE", "if node.lock_ref < 0:", "if node.lock_ref <= 0:")
SCRIPTED = _mutant(RADIX, 12, "ReplaceTrueWithFalse", f"x = True  # {SCRIPT}", f"x = False  # {SCRIPT}")
RESULTS = (
    _result(
        _mutant(POOL, 40, "ReplaceBinaryOperator_Sub_Add", "n = end - start", "n = end + start"),
        "killed",
        kill_class="behavioural",
        failure=KILLER,
    ),
    _result(
        _mutant(POOL, 41, "ReplaceComparisonOperator_Eq_NotEq", "if a == b:", "if a != b:"),
        "killed",
        kill_class="structural",
        failure=KILLER,
    ),
    _result(_mutant(RADIX, 77, "AddNot", "if evict:", "if not evict:"), "killed", kill_class="behavioural"),
    _result(_mutant(POOL, 60, "ReplaceAndWithOr", "if a and b:", "if a or b:"), "error", failure=CRASH),
    _result(_mutant(POOL, 70, "ZeroIterationForLoop", "for x in xs:", "for x in []:"), "timeout"),
    _result(EQUIVALENT, "survived"),
    _result(GAP, "survived"),
    MutantResult(mutant=SCRIPTED, status="unreached"),  # no test reaches it
)


def mutation_run(results=RESULTS, **fields) -> MutationRun:
    head = dict(
        target="sglang",
        engine_version="0.5.23",
        source_digest="ab" * 32,
        mutator="cosmic-ray 8.7.1",
        operators=("AddNot", "NumberReplacer"),
        population=3120,
        sample=8,
        seed=7,
        shard="1/1",
        generated_at="2026-12-01T03:04:05+00:00",
        wall_s=612.4,
        recording_s=158.0,
        jobs=2,
    )
    return MutationRun(**{**head, **fields}, results=tuple(results))


@pytest.fixture()
def classified(monkeypatch) -> dict[str, Classified]:
    """The equivalent mutant classified in the survivors table, for this test only."""
    monkeypatch.setitem(survivors.SURVIVORS, EQUIVALENT.id, Classified("equivalent", EQUIVALENT_REASON))
    return {EQUIVALENT.id: Classified("equivalent", EQUIVALENT_REASON)}


@pytest.fixture(scope="module")
def comparison():
    on = RunResult("gsm_style", "tape", "m", True, None, _items("gsm_style", 40), 1.0, RunRecord("tape"))
    off = RunResult("gsm_style", "off", "m", True, None, _items("gsm_style", 40), 1.0, RunRecord("off"))
    comparisons = [compare_runs(on, off, thresholds=Thresholds(resamples=100))]
    return comparisons, [on, off]


def _page(comparison, reports: Path):
    comparisons, runs = comparison
    html = render_html(
        comparisons,
        runs,
        summary=summarize(comparisons),
        provenance={},
        generated_at="now",
        mutation_runs=load_mutation_runs(reports / "kill-matrix.json"),
    )
    return html, _parse(html)


def test_a_mutation_run_is_its_own_section_with_score_counts_and_each_survivor_classified(
    comparison, classified, tmp_path
) -> None:
    run = mutation_run()
    save(run, tmp_path / "mutants-sglang.json")
    html, page = _page(comparison, tmp_path)
    section = page.root.find("section", id="mutants")
    assert section.find("h2").text() == "Mutation score"
    assert page.root.find("nav", class_="toc").find("a", href="#mutants").text() == "mutation score"
    [target] = section.find_all("div", class_="mut-target")
    assert target.attrs["data-target"] == "sglang"
    described = score(run, classified).describe()
    assert described.startswith("42.9% (3 killed of 7 non-equivalent; 1 equivalent, 2 not killed")
    assert target.find("p", class_="mut-score").find("strong").text() == f"score {described}"
    counts = " ".join(target.find("p", class_="mut-score").text().split())
    assert "3 killed · 1 error · 1 timeout · 2 survived · 1 unreached" in counts
    label = " ".join(target.find("p", class_="mut-label").text().split())  # another run's numbers, said so
    assert label.startswith("Measured by swa-harness mutants --target sglang, not by this run, on 2026-12-01 03:04:05")
    assert "sglang 0.5.23, mutants by cosmic-ray 8.7.1, a sample of 8 of 3120 mutants (seed 7)" in label
    assert "612 s of wall with 2 jobs (the clean recording 158 s)" in label

    modules = {
        r.attrs["data-module"]: [td.text().strip() for td in r.find_all("td")[1:]]
        for r in target.find_all("tr", class_="mut-module")
    }
    assert modules == {POOL: ["5", "2", "1", "1", "1", "0"], RADIX: ["3", "1", "0", "0", "1", "1"]}

    rows = {r.attrs["data-mutant"]: r for r in target.find("table", class_="mut-not-killed").find_all("tr")[1:]}
    assert [r.attrs["data-status"] for r in rows.values()] == ["error", "timeout", "survived", "survived", "unreached"]
    equivalent = rows[EQUIVALENT.id]
    assert [c.text() for c in equivalent.find_all("code", class_="minus")] == ["- for i in range(0, n):"]
    assert [c.text() for c in equivalent.find_all("code", class_="plus")] == ["+ for i in range(1 - 1, n):"]
    where = equivalent.find("td", class_="where")
    assert where.find("code").text() == f"{POOL}:88" and where.find("span", class_="test").text() == "SWAKVPool.free"
    assert equivalent.attrs["data-kind"] == "equivalent"
    assert equivalent.find("span", class_="mut-kind").text() == "equivalent"
    assert EQUIVALENT_REASON in equivalent.find("td", class_="why").text()
    gap = rows[GAP.id]
    assert gap.find("code", class_="plus").text() == "+ if node.lock_ref <= 0:"  # "<" escaped, read back whole
    assert gap.attrs["data-kind"] == "" and gap.find("td", class_="why").text().strip() == "not classified"
    error = rows[f"{POOL}:60:ReplaceAndWithOr:0"]
    assert "IndexError: out of range" in error.text()  # an error's first crash
    assert error.find("td", class_="why").text().startswith("not classified: detected (a crash or a hang)")
    assert "no test reaches it" in rows[SCRIPTED.id].find("td").text()
    assert target.find("span", class_="mut-unclassified").text() == "(2 not classified)"  # as the score counts
    assert "script" not in page.start_tags and SCRIPT in rows[SCRIPTED.id].find("code", class_="minus").text()

    killed = target.find("details", class_="mut-killed")
    assert "open" not in killed.attrs  # folded
    assert killed.find("summary").text().startswith("the 3 killed mutants")
    first = killed.find("tr", data_mutant=f"{POOL}:40:ReplaceBinaryOperator_Sub_Add:0")
    assert first.attrs["data-kill-class"] == "behavioural"
    assert first.find("span", class_="kill-class").text() == "behavioural"
    killer = first.find("td", class_="killed").find("span", class_="test").text()
    assert killer == "test_ownership.py::test_free_returns_every_slot [test_ownership.py:41]"

    top = page.root.find("section", id="verdict").find("div", class_="mutants-count")
    assert top.attrs["data-target"] == "sglang"
    assert " ".join(top.text().split()) == (
        f"mutation score (sglang, another run's numbers): score {described}; 8 mutants: 3 killed, 1 error, "
        "1 timeout, 2 survived, 1 unreached (sglang 0.5.23, 2026-12-01)"
    )
    assert str(tmp_path) not in html  # no machine paths on a page


def test_every_target_is_shown_and_a_shard_says_so(comparison, tmp_path) -> None:
    save(mutation_run(), tmp_path / "mutants-sglang.json")
    save(mutation_run(RESULTS[:2], target="vllm", engine_version="0.32.0", shard="2/4"), tmp_path / "mutants-vllm.json")
    _, page = _page(comparison, tmp_path)
    section = page.root.find("section", id="mutants")
    targets = {d.attrs["data-target"]: d for d in section.find_all("div", class_="mut-target")}
    assert list(targets) == ["sglang", "vllm"]
    assert "shard 2/4: 2 of them" in targets["vllm"].find("p", class_="mut-label").text()
    assert not targets["vllm"].find_all("table", class_="mut-not-killed")  # both killed: no table of survivors
    assert len(page.root.find("section", id="verdict").find_all("div", class_="mutants-count")) == 2


def test_no_mutation_run_no_section(comparison, tmp_path) -> None:
    assert load_mutation_runs(tmp_path / "kill-matrix.json") == [] and load_mutation_runs(None) == []
    assert load_mutation_runs(tmp_path / "absent" / "kill-matrix.json") == []
    html, page = _page(comparison, tmp_path)
    assert not page.root.find_all(id="mutants") and 'href="#mutants"' not in html
    assert not page.root.find_all("div", class_="mutants-count")


def test_a_damaged_mutation_report_is_shown_unreadable_not_a_failed_report(comparison, tmp_path) -> None:
    (tmp_path / "mutants-sglang.json").write_text('{"target": "sglang", "results": [')
    (tmp_path / "mutants-vllm.json").write_text(json.dumps({"target": "vllm", "results": []}))
    found = {f.target: f for f in load_mutation_runs(tmp_path / "kill-matrix.json")}
    assert found["sglang"].run is None and found["sglang"].error.startswith("JSONDecodeError")
    assert found["vllm"].run is None and found["vllm"].error.startswith("malformed: KeyError")
    _, page = _page(comparison, tmp_path)
    section = page.root.find("section", id="mutants")
    lines = {
        d.attrs["data-target"]: d.find("p", class_="mut-unreadable").text()
        for d in section.find_all("div", class_="mut-target")
    }
    assert lines["sglang"].startswith("unreadable: JSONDecodeError") and "malformed: KeyError" in lines["vllm"]
    top = page.root.find("section", id="verdict").find_all("div", class_="mutants-count")
    assert [t.text().split(": ", 1)[1] for t in top][0].startswith("unreadable: JSONDecodeError")


def test_a_field_of_another_type_is_shown_malformed_not_a_failed_report(tmp_path) -> None:
    data = mutation_run().to_json() | {"wall_s": "long", "generated_at": None}
    (tmp_path / "mutants-sglang.json").write_text(json.dumps(data))
    [found] = load_mutation_runs(tmp_path / "kill-matrix.json")
    view = mutation_run_view(found)
    assert view["error"].startswith("malformed: ") and view["summary"].startswith("unreadable: malformed: ")


def test_the_job_reads_the_mutation_runs_beside_its_kill_matrix(tmp_path) -> None:
    save(mutation_run(), tmp_path / "mutants-sglang.json")
    options = RunOptions(kill_matrix=tmp_path / "kill-matrix.json", fault_effects=None, release_matrix=None)
    [found] = SideInputs.read(options).mutation_runs
    assert found.target == "sglang" and found.run == mutation_run()
    assert SideInputs.read(RunOptions(kill_matrix=None, fault_effects=None, release_matrix=None)).mutation_runs == []


def test_the_view_counts_a_status_it_does_not_know(tmp_path) -> None:
    odd = MutantResult(mutant=GAP, status="skipped")  # a newer producer's status: shown, not dropped
    save(mutation_run((*RESULTS[:1], odd)), tmp_path / "mutants-sglang.json")
    [found] = load_mutation_runs(tmp_path / "kill-matrix.json")
    view = mutation_run_view(found)
    assert view["counts"][-1] == ("skipped", 1) and [r["status"] for r in view["not_killed"]] == ["skipped"]


def test_the_report_reads_mutation_runs_without_cosmic_ray(tmp_path) -> None:
    save(mutation_run(), tmp_path / "mutants-sglang.json")
    code = (
        "import sys; sys.modules['cosmic_ray'] = None\n"  # any import of cosmic_ray now fails
        "from pathlib import Path\n"
        "from harness.report.inputs import load_mutation_runs\n"
        "from harness.report.views import mutation_run_view\n"
        f"[f] = load_mutation_runs(Path({str(tmp_path / 'kill-matrix.json')!r}))\n"
        "print(mutation_run_view(f)['summary'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("score 37.5% (3 killed of 8 non-equivalent")
