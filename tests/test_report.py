"""The HTML report: one self-contained file, verdict on top, escaped model text, no network."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.evals.compare import Thresholds, compare_runs, summarize
from harness.evals.history import load as load_history
from harness.evals.results import ItemResult, RunRecord, RunResult
from harness.jobs.cpu import EvalConfig, cpu_plan
from harness.jobs.options import RunOptions
from harness.jobs.plan import Plan
from harness.jobs.report_cli import main as report_main
from harness.jobs.summary import finish
from harness.report import render_html, render_report
from harness.kill_record import KillMatrix
from harness.mutants.record import save as save_mutation_run
from harness.report.inputs import load_fault_effects, load_kill_matrices, load_release_matrix, matrices_from
from harness.report.render import TEMPLATES, breakable

SCRIPT = "<script>alert(1)</script>"
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

KILL_MATRIX = {
    "generated_at": "2026-01-01T00:00:00Z",
    "wall_s": 12.5,
    "clean": {"gsm_style": {"status": "passed", "detail": "ok"}, "aime_style": {"status": "passed", "detail": "ok"}},
    "faults": [
        {
            "id": "swa-window-off-by-one",
            "seed": "17",
            "breaks": "the sliding-window mask keeps one token too many",
            "user_sees": "wrong answers on long prompts",
            "suites": {
                "gsm_style": {"status": "killed", "first_failure": "assert accuracy drop <= 0.02 & p < 0.05"},
                "aime_style": {"status": "survived", "first_failure": None},
            },
        },
        {
            "id": "stale-graph-buffer",
            "seed": "3",
            "breaks": "graph replay reads last step's positions",
            "user_sees": "garbage after the first token",
            "suites": {
                "gsm_style": {"status": "killed", "first_failure": "flip count 40 > 0"},
                "aime_style": {"status": "error", "first_failure": "server exited 137"},
            },
        },
    ],
}
PROVENANCE = {
    "commit": "0123abcd",
    "versions": {"python": "3.11.7", "torch": "2.13.0+cpu", "lm-eval": "0.4.13"},
    "flags": {"graphs": "tape", "max_gen_toks": 128},
    "seeds": [1001, 2001],
    "checkpoint_sha256": "feedbeef" * 8,
}


class _Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: _Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[_Node | str] = []

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self):
        yield self
        for child in self.children:
            if isinstance(child, _Node):
                yield from child.walk()

    def find_all(self, tag: str | None = None, **attrs: str) -> list[_Node]:
        def match(node: _Node) -> bool:
            if tag is not None and node.tag != tag:
                return False
            for key, value in attrs.items():
                key = key.rstrip("_").replace("_", "-")
                if key == "class":
                    if value not in (node.attrs.get("class") or "").split():
                        return False
                elif node.attrs.get(key) != value:
                    return False
            return True

        return [node for node in self.walk() if match(node)]

    def find(self, tag: str | None = None, **attrs: str) -> _Node:
        found = self.find_all(tag, **attrs)
        assert found, f"no <{tag}> with {attrs}"
        return found[0]


class _TreeBuilder(HTMLParser):
    """A minimal DOM from the stdlib parser: enough to query ids, classes and text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = _Node("#document", {}, None)
        self.current = self.root
        self.start_tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.start_tags.append(tag)
        node = _Node(tag, dict(attrs), self.current)
        self.current.children.append(node)
        if tag not in VOID:
            self.current = node

    def handle_startendtag(self, tag, attrs):
        self.start_tags.append(tag)
        self.current.children.append(_Node(tag, dict(attrs), self.current))

    def handle_endtag(self, tag):
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        assert node is not None and node.parent is not None, f"unbalanced </{tag}>"
        self.current = node.parent

    def handle_data(self, data):
        self.current.children.append(data)


def _parse(html: str) -> _TreeBuilder:
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    assert builder.current is builder.root, "unclosed elements"
    return builder


def _items(suite: str, n: int, broken: set[int] = frozenset(), fixed: set[int] = frozenset()) -> list[ItemResult]:
    out = []
    for i in range(n):
        correct = i % 4 != 0
        response = f"Step: {i} + 1 = {i + 1} & done\n#### {i + 1 if correct else 0}"
        if i in broken:
            correct, response = False, f"Step: {i} + 1 = {SCRIPT} & oops\n#### 0"
        if i in fixed:
            correct, response = True, f"Step: {i} + 1 = {i + 1} & fixed\n#### {i + 1}"
        out.append(
            ItemResult(
                f"{suite}/{i}",
                f"Question {i}: <b>{i}</b> & 1?",
                str(i + 1),
                response,
                str(i + 1) if correct else "0",
                correct,
            )
        )
    return out


def _scenario() -> tuple[list, list[RunResult]]:
    """gsm_style: GREEN with flips carrying a <script>; aime_style: ON run died (INCOMPLETE)."""
    gsm_on = RunResult(
        "gsm_style",
        "tape",
        "gemma2-tiny-swa",
        True,
        None,
        _items("gsm_style", 500, broken={1, 2, 5}, fixed={4, 8}),
        30.0,
        RunRecord("tape"),
    )
    gsm_off = RunResult(
        "gsm_style", "off", "gemma2-tiny-swa", True, None, _items("gsm_style", 500), 41.0, RunRecord("off")
    )
    aime_on = RunResult(
        "aime_style",
        "tape",
        "gemma2-tiny-swa",
        False,
        "server died: exit 137 & <no stderr>",
        _items("aime_style", 7),
        3.0,
        RunRecord("tape"),
    )
    aime_off = RunResult(
        "aime_style", "off", "gemma2-tiny-swa", True, None, _items("aime_style", 200), 20.0, RunRecord("off")
    )
    t = Thresholds(resamples=1000)
    comparisons = [compare_runs(gsm_on, gsm_off, thresholds=t), compare_runs(aime_on, aime_off, thresholds=t)]
    return comparisons, [gsm_on, gsm_off, aime_on, aime_off]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, str, _TreeBuilder]:
    comparisons, runs = _scenario()
    out = tmp_path_factory.mktemp("report")
    path = render_report(
        comparisons,
        runs,
        summary=summarize(comparisons),
        kill_matrices=matrices_from([KILL_MATRIX]),
        provenance=PROVENANCE,
        out_dir=out / "latest",
    )
    html = path.read_text(encoding="utf-8")
    return path, html, _parse(html)


# ------------------------------------------------------------------ two nightly runs through finish()

LONG_COMMAND = [
    "/usr/bin/python3",
    "-m",
    "lm_eval",
    "run",
    "--model",
    "local-completions",
    "--samples",
    json.dumps({"swa_aime_style": list(range(200)), "swa_gsm_style": list(range(500))}),
]
TIMEOUT_ERROR = f"TimeoutExpired: Command '{LONG_COMMAND}' timed out after 3600 seconds"
LONG_TEST = (
    "suites/differential/test_graph_vs_eager.py::TestGraphVsEagerOverTheRealPool::"
    "test_graph_replay_equals_eager_kv_for_every_bucket_and_padding_length[gemma3-tiny-swa-bucket-64-pad-63]"
)
NIGHTLY_MATRIX = {
    **KILL_MATRIX,
    "faults": [
        {
            **KILL_MATRIX["faults"][0],
            "id": "swa-window-off-by-one-in-the-decode-path-of-the-hybrid-pool-translation",
            "suites": {
                "gsm_style": {
                    "status": "killed",
                    "killer": LONG_TEST,
                    "first_failure": f"{LONG_TEST.split('/')[-1]} [test_graph_vs_eager.py:7]: assert " + "x" * 400,
                    "kill_class": "behavioural",
                },
                "aime_style": {"status": "killed", "first_failure": "dtype int64 != int32", "kill_class": "structural"},
            },
        },
        KILL_MATRIX["faults"][1],
    ],
}
SGLANG_MATRIX = {**KILL_MATRIX, "target": "sglang", "faults": KILL_MATRIX["faults"][:1]}
FAULT_EFFECTS = [
    {
        "fault": "pad-swa-loc-not-zeroed",
        "checkpoint": "gemma2-tiny-swa",
        "suite": "gsm_style",
        "delta_pp": -12.4,
        "verdict": "RED",
        "n": 200,
        "measured_at": "2026-11-23",
    },
    {
        "fault": "capture-after-warm-cache",
        "checkpoint": "gemma3-tiny-swa",
        "suite": "aime_style",
        "delta_pp": 0.0,
        "verdict": "GREEN",
        "n": 100,
        "measured_at": "2026-11-23",
    },
]


MODEL = "gemma2-tiny-swa"


def _pair(
    suite: str, n: int, *, broken: set[int] = frozenset(), error: str | None = None, fault: str | None = None
) -> list[RunResult]:
    """An ON/OFF pair as the runner saves it (model slug, arm in its record); ``error`` makes the ON run
    incomplete, ``fault`` was injected into it."""
    on_record = RunRecord(
        "on",
        served_by="harness",
        graphs="tape",
        fault=fault,
        start_s=2.5,
        counters={"requests_served": n, "generated_tokens": 40 * n, "steps": 900},
    )
    on_items = [] if error else _items(suite, n, broken=broken)
    on = RunResult(suite, "tape", MODEL, error is None, error, on_items, 33.0, on_record)
    off = RunResult(
        suite, "off", MODEL, True, None, _items(suite, n), 35.0, replace(on_record, arm="off", graphs="off", fault=None)
    )
    return [on, off]


def _eval_plan(root: Path, out: Path, limits: dict[str, int], cache_off: bool = False) -> Plan:
    """The CPU job's plan for a model folder named ``MODEL`` under ``root`` (no tokenizer: flips split by character),
    whose slug the runs carry: by default its graphs comparison alone (``--no-cache-off``: ON vs OFF, its report
    ``<out>/index.html``), the report these tests read; ``cache_off``: the whole job (an overview at
    ``<out>/index.html``, each comparison's report under ``<out>/MODEL/compare/``)."""
    (root / MODEL).mkdir(parents=True, exist_ok=True)
    plan = cpu_plan(EvalConfig(model=root / MODEL, limits=limits, out=out, cache_off=cache_off))
    compare = out / MODEL / "compare"
    dirs = [compare / "on-vs-off", compare / "cache-off-vs-on"] if cache_off else [out]
    assert plan.models[0].slug == MODEL and [c.dir for c in plan.comparisons] == dirs
    return plan


def _nightly_provenance(run: int) -> dict:
    """What the job shares between comparisons; ``finish`` adds the engine, model and arms from the plan."""
    return {
        "run": {
            "id": f"night-{run}",
            "recorded at": f"2026-01-0{run}T03:00:00+00:00",
            "command": "swa-harness eval --out reports/latest",
        },
        "hardware": {"device": "cpu", "cpu": "AMD EPYC", "logical cores": 2},
        "software": {"torch": "2.13.0+cpu", "lm-eval": "0.4.13"},
        "datasets": {"gsm_style": {"test.jsonl": "9d786b50e0e8c8cf"}},
    }


RELEASE_MATRIX = {
    "command": "swa-harness sglang-matrix",
    "date": "2026-11-27",
    "suites": {"pool": ["suites/pool"], "replay": ["suites/sglang/test_seed_replay.py"]},
    "rows": [
        {
            "release": "0.5.11",
            "install_s": 30.0,
            "run_s": 40.0,
            "error": "",
            "cells": {
                "pool": {
                    "status": "passed",
                    "passed": 9,
                    "failed": [],
                    "xfailed": 0,
                    "skipped": {"SGLang 0.5.11's paged alloc_extend launches a Triton kernel: CPU-unreachable": 3},
                },
                "replay": {
                    "status": "failed",
                    "passed": 0,
                    "failed": ["suites/sglang/test_seed_replay.py::t: #24743"],
                    "xfailed": 0,
                    "skipped": {},
                },
            },
        },
        {"release": "0.5.99", "install_s": 1.0, "run_s": 0.0, "error": "install failed: no such release", "cells": {}},
        {
            "release": "0.6.0",
            "install_s": 1.0,
            "run_s": 2.0,
            "error": "",
            "cells": {  # merged from a pool-only rerun
                "pool": {"status": "passed", "passed": 8, "failed": [], "xfailed": 0, "skipped": {}}
            },
        },
    ],
}


def run_nightly(root: Path) -> tuple[list[int], Path, Path]:
    """Two evals through ``finish``: night 1 GREEN, night 2 RED (gsm_style drops, aime_style times out)."""
    history, out = root / "history.jsonl", root / "latest"
    (root / "kill-matrix.json").write_text(json.dumps(NIGHTLY_MATRIX))
    (root / "kill-matrix-sglang.json").write_text(json.dumps(SGLANG_MATRIX))
    (root / "fault-effects.json").write_text(json.dumps(FAULT_EFFECTS))
    (root / "sglang-matrix.json").write_text(json.dumps(RELEASE_MATRIX))
    from tests.test_report_mutants import mutation_run  # a synthetic run of every status

    save_mutation_run(mutation_run(), root / "mutants-sglang.json")  # read beside the kill matrices
    plan = _eval_plan(root, out, {"gsm_style": 500, "aime_style": 200})
    on = plan.run_for(plan.models[0], "on")
    on.dir.mkdir(parents=True)  # the provenance reads the server command from the first line of its log
    (on.dir / "server.log").write_text("$ " + " ".join(LONG_COMMAND) + "\n")
    options = RunOptions(
        thresholds=Thresholds(resamples=1000),
        kill_matrix=root / "kill-matrix.json",
        fault_effects=root / "fault-effects.json",
        release_matrix=root / "sglang-matrix.json",
        history=history,
    )
    nights = [
        _pair("gsm_style", 500) + _pair("aime_style", 200),
        _pair("gsm_style", 500, broken=set(range(1, 120, 4))) + _pair("aime_style", 200, error=TIMEOUT_ERROR),
    ]
    codes = [finish(plan, runs, options, _nightly_provenance(i + 1)) for i, runs in enumerate(nights)]
    return codes, out / "index.html", history


@pytest.fixture(scope="module")
def nightly(tmp_path_factory) -> tuple[list[int], Path, str, _TreeBuilder, Path]:
    codes, path, history = run_nightly(tmp_path_factory.mktemp("nightly"))
    html = path.read_text(encoding="utf-8")
    return codes, path, html, _parse(html), history


def test_writes_one_index_html(report) -> None:
    path, html, _ = report
    assert path.name == "index.html"
    assert [p.name for p in path.parent.iterdir()] == ["index.html"]
    assert html.startswith("<!DOCTYPE html>")


def test_verdict_is_at_the_top_with_its_reason(report) -> None:
    _, html, page = report
    section = page.root.find("section", id="verdict")
    assert section.attrs["data-verdict"] == "NO-VERDICT"  # aime_style never ran to the end: nothing to colour
    assert page.root.find(id="verdict-word").text().strip() == "NO VERDICT"
    assert page.root.find("title").text().startswith("NO VERDICT")
    reason = page.root.find(id="verdict-reason").text()
    assert "aime_style" in reason and "incomplete" in reason and "server died: exit 137 & <no stderr>" in reason
    assert "gsm_style" not in reason  # only the suites that set the verdict
    assert html.index('id="verdict"') < html.index('id="provenance"') < html.index('id="suites"')
    assert "fault kill matrix (harness): 2 of 2 faults killed" in section.text()


def _cell(row: _Node, col: str) -> str:
    """The text of the element marked ``data-col=col`` in ``row``, whitespace collapsed."""
    return " ".join(next(n for n in row.walk() if n.attrs.get("data-col") == col).text().split())


def test_suite_rows(report) -> None:
    _, _, page = report
    rows = {row.attrs["data-suite"]: row for row in page.root.find_all("tr", class_="suite-row")}
    assert set(rows) == {"gsm_style", "aime_style"}
    gsm = rows["gsm_style"]
    assert gsm.attrs["data-verdict"] == "GREEN"
    assert _cell(gsm, "n") == "500"
    assert _cell(gsm, "on").startswith("74.8 %") and "[70.8 %, 78.4 %]" in _cell(gsm, "on")  # 375 - 3 broken + 2 fixed
    assert _cell(gsm, "off").startswith("75.0 %")
    assert _cell(gsm, "diff").startswith("-0.2 pp")
    assert _cell(gsm, "bc") == "2 / 3" and _cell(gsm, "divergent") == "5"
    aime = rows["aime_style"]
    assert aime.attrs["data-verdict"] == "NO-VERDICT"
    assert "INCOMPLETE" in aime.text() and "%" not in aime.text()  # never an accuracy


def test_the_mde_footnote_is_this_runs_own(report) -> None:
    """It used to be fixed text (1.6 pp at N = 500 and 3.9 pp at N = 200) under every run, whatever its N."""
    _, html, page = report
    note = " ".join(page.root.find("section", id="suites").text().split())
    assert "(this run: gsm_style " in note and " pp at N = 500)" in note
    assert "3.9 pp at N = 200" not in html


def test_incomplete_run_shows_no_accuracy(report) -> None:
    _, _, page = report
    runs = page.root.find_all("tr", class_="run-row")
    assert len(runs) == 4
    broken = [r for r in runs if r.attrs["data-suite"] == "aime_style" and r.attrs["data-graphs"] == "tape"][0]
    assert "INCOMPLETE" in broken.text() and "server died" in broken.text() and "%" not in broken.text()
    complete = [r for r in runs if r.attrs["data-suite"] == "aime_style" and r.attrs["data-graphs"] == "off"][0]
    assert "75.0 %" in complete.text()


def test_model_text_is_escaped(report) -> None:
    _, html, page = report
    assert "script" not in page.start_tags
    assert SCRIPT not in html  # only in escaped form
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>" not in html and "&amp; done" in html
    on = page.root.find_all("pre", class_="on")
    assert any(SCRIPT in pre.text() for pre in on)  # present as text, not as a tag


def test_flips_are_side_by_side_with_the_divergence_marked(report) -> None:
    _, _, page = report
    diffs = page.root.find_all("div", class_="diff")
    flips = [d for d in diffs if d.attrs["data-direction"] != "same"]
    assert sorted(d.attrs["data-item"] for d in flips) == [
        "gsm_style/1",
        "gsm_style/2",
        "gsm_style/4",
        "gsm_style/5",
        "gsm_style/8",
    ]
    assert flips[0].attrs["data-direction"] == "ON broke"  # broken ones first
    one = [d for d in flips if d.attrs["data-item"] == "gsm_style/1"][0]
    on_pre, off_pre = one.find("pre", class_="on"), one.find("pre", class_="off")
    common = "Step: 1 + 1 = "
    assert on_pre.text() == f"{common}{SCRIPT} & oops\n#### 0"
    assert on_pre.find("mark").text() == f"{SCRIPT} & oops\n#### 0"
    assert off_pre.find("mark").text() == "2 & done\n#### 2"
    assert "gold 2" in " ".join(one.find("div", class_="diff-head").text().split())


def test_text_diffs_name_their_first_divergent_token() -> None:
    """A generation that differs without flipping correctness shows where and with which token."""
    on_items = [ItemResult(f"g/{i}", "Q", "4", "2 + 2 = 4\n#### 4", "4", True) for i in range(40)]
    off_items = list(on_items)
    off_items[3] = ItemResult("g/3", "Q", "4", "2 plus 2 = 4\n#### 4", "4", True)
    on, off = (
        RunResult("g", mode, "m", True, None, items, 1.0, RunRecord(mode))
        for mode, items in (("tape", on_items), ("off", off_items))
    )
    words = str.split  # a stand-in tokenizer: the diff index is in its units
    comparisons = [compare_runs(on, off, thresholds=Thresholds(resamples=200), tokenize=words)]
    page = _parse(render_html(comparisons, [on, off], summary=summarize(comparisons), provenance={}, tokenize=words))
    diff = page.root.find("div", class_="diff")
    assert diff.attrs["data-direction"] == "same" and diff.attrs["data-item"] == "g/3"
    head = " ".join(diff.find("div", class_="diff-head").text().split())
    assert "first divergent token #1" in head
    assert diff.find("code", class_="tok-on").text() == '"+"' and diff.find("code", class_="tok-off").text() == '"plus"'


def test_flip_sections_link_back_to_the_summary(report) -> None:
    _, _, page = report
    for section in page.root.find_all("section", class_="flip-page"):
        suite = section.attrs["data-suite"]
        back = section.find("a", class_="back")
        assert back.attrs["href"] == f"#suite-{suite}"
        assert page.root.find_all("tr", id=f"suite-{suite}")  # the link lands on the suite's summary row


def test_forest_plot_is_inline_svg(report) -> None:
    _, _, page = report
    svg = page.root.find("section", id="forest").find("svg")
    rows = {g.attrs["data-suite"]: g for g in svg.find_all("g", class_="forest-row")}
    assert set(rows) == {"gsm_style", "aime_style"}
    assert rows["gsm_style"].find_all("rect") and "INCOMPLETE" in rows["aime_style"].text()
    assert svg.find_all("line", class_="zero")


def test_kill_matrix_cells(report) -> None:
    _, html, page = report
    km = page.root.find("section", id="kill-matrix")
    faults = {row.attrs["data-fault"]: row for row in km.find_all("tr", class_="fault-row")}
    assert set(faults) == {"swa-window-off-by-one", "stale-graph-buffer"}
    cells = faults["swa-window-off-by-one"].find_all("td")
    assert "killed" in cells[3].attrs["class"] and cells[3].attrs["title"] == "assert accuracy drop <= 0.02 & p < 0.05"
    assert "survived" in cells[4].attrs["class"]
    assert "error" in faults["stale-graph-buffer"].find_all("td")[4].attrs["class"]
    assert not km.find_all("span", class_="kill-class")  # an older producer wrote no kill class: none shown


def test_provenance_is_grouped_key_value_tables(report) -> None:
    _, _, page = report
    section = page.root.find("section", id="provenance")
    groups = {card.attrs["data-group"]: card for card in section.find_all("div", class_="prov-card")}
    assert set(groups) == {"run", "versions", "flags"}  # loose top-level keys are gathered under "run"

    def table(group: str) -> dict[str, str]:
        return {th.text(): th.parent.find("td").text().strip() for th in groups[group].find_all("th")}

    assert table("versions")["torch"] == "2.13.0+cpu" and table("run")["commit"] == "0123abcd"
    assert table("run")["seeds"] == "1001, 2001"
    digest = next(td for td in groups["run"].find_all("code") if td.attrs.get("title") == "feedbeef" * 8)
    assert digest.text() == "feedbeeffeed…"  # a hash is shortened, the whole of it on hover
    glance = {tr.attrs["data-key"]: tr.text() for tr in section.find("table", id="provenance-glance").find_all("tr")}
    assert "harness 0123abcd" in glance["engine under test"]
    thresholds = {
        th.text(): th.parent.find("td").text() for th in page.root.find("section", id="thresholds").find_all("th")
    }
    assert thresholds["max_drop"] == "0.02"


def test_breakable_ids_stay_escaped() -> None:
    assert str(breakable("<script>x_y.z</script>")) == "&lt;script&gt;x_<wbr>y.<wbr>z&lt;/<wbr>script&gt;"


def test_report_is_self_contained(report) -> None:
    _, html, page = report
    assert "http://" not in html and "https://" not in html
    assert not {"link", "img", "iframe", "object"} & set(page.start_tags)
    for node in page.root.walk():
        for key in ("src", "href"):
            value = node.attrs.get(key)
            assert value is None or value.startswith("#"), (node.tag, key, value)
    assert "<style>" in html and "<svg" in html


def test_green_report_and_no_kill_matrix(tmp_path) -> None:
    on = RunResult("gsm_style", "cuda", "m", True, None, _items("gsm_style", 500), 1.0, RunRecord("cuda"))
    off = RunResult("gsm_style", "off", "m", True, None, _items("gsm_style", 500), 1.0, RunRecord("off"))
    comparisons = [compare_runs(on, off)]
    html = render_html(comparisons, [on, off], summary=summarize(comparisons), provenance={}, generated_at="then")
    page = _parse(html)
    assert page.root.find(id="verdict-word").text().strip() == "GREEN"
    assert not page.root.find_all(id="kill-matrix") and not page.root.find_all(id="fault-effects")
    assert "then" in html and "no provenance recorded" in html and "No history recorded" in html


def test_templates_ship_with_the_package() -> None:
    assert (TEMPLATES / "report.html.j2").is_file()
    assert TEMPLATES.parent.name == "report" and TEMPLATES.parent.parent.name == "harness"


# ------------------------------------------------------------------ history and trend


def test_two_consecutive_runs_show_a_trend_with_the_verdict_change(nightly) -> None:
    codes, _, _, page, history = nightly
    assert codes == [0, 2]  # night 1 GREEN, night 2 RED (gsm_style) with an incomplete run: no verdict (exit 2)
    records = [json.loads(line) for line in history.read_text().splitlines()]
    assert [r["run_id"] for r in records] == ["night-1", "night-2"] and [r["verdict"] for r in records] == [
        "GREEN",
        "RED",
    ]
    gsm = next(s for s in records[1]["suites"] if s["suite"] == "gsm_style")
    assert gsm["on_broke"] == 30 and gsm["on"]["value"] == pytest.approx(0.69) and gsm["off"]["value"] == 0.75
    assert gsm["delta"]["high"] < 0 and records[1]["provenance"]["run"]["id"] == "night-2"
    since = page.root.find(id="verdict-since")
    assert since.attrs["data-since"] == "2" and "GREEN before" in since.text()
    trend = page.root.find("section", id="trend")
    for suite in ("gsm_style", "aime_style"):
        card = trend.find("div", id=f"trend-{suite}")
        rows = {r.attrs["data-index"]: r for r in card.find_all("tr", class_="trend-row")}
        assert set(rows) == {"1", "2"}
        assert rows["2"].attrs["data-changed-from"] == "GREEN" and "verdict-change" in rows["2"].attrs["class"]
        assert rows["1"].attrs["data-changed-from"] == "" and "current" in rows["2"].attrs["class"]
        assert "changed from GREEN" in rows["2"].text()
        chart = card.find("svg", class_="trend")
        now = "RED" if suite == "gsm_style" else "NO VERDICT"  # aime_style's run never finished
        assert chart.find_all("line", class_="change") and f"GREEN→{now}" in chart.text()
    aime_points = trend.find("div", id="trend-aime_style").find("svg").find_all("g", class_="trend-point")
    assert [g.attrs.get("class") for g in aime_points] == ["trend-point", "trend-point incomplete"]


def test_rerendering_the_same_runs_replaces_their_history_record(tmp_path, capsys) -> None:
    """`swa-harness report` judges saved runs again: their history record is updated, not duplicated."""
    out, history = tmp_path / "latest", tmp_path / "history.jsonl"
    plan = _eval_plan(tmp_path, out, {"gsm_style": 100})
    out.mkdir()
    (out / "plan.json").write_text(plan.to_json())  # what the job saved beside its runs: the report rebuilds it
    for run in _pair("gsm_style", 100):
        run.save(plan.run_for(plan.models[0], run.record.arm).dir / "runs" / f"{run.task}.json")
    args = ["--out", str(out), "--kill-matrix", str(tmp_path / "none.json"), "--resamples", "200"]
    assert report_main([*args, "--history", str(history)]) == 0
    assert json.loads(history.read_text())["verdict"] == "AMBER"  # N = 100 is underpowered at max_mde 5 pp
    assert report_main([*args, "--history", str(history), "--max-mde", "0.2"]) == 0  # judged again: GREEN
    records = [json.loads(line) for line in history.read_text().splitlines()]
    assert len(records) == 1 and records[0]["run_id"].startswith("runs-") and records[0]["verdict"] == "GREEN"
    assert records[0]["provenance"]["re-rendered by"] == "swa-harness report"
    assert report_main([*args, "--no-history"]) == 0
    assert len(history.read_text().splitlines()) == 1  # --no-history records nothing
    assert "No history recorded" in (out / "index.html").read_text()
    assert f"history: {history}" in capsys.readouterr().out


def test_each_comparison_of_the_main_job_keeps_its_own_history_record(tmp_path, capsys) -> None:
    """Both comparisons share the job's run id: each line names its comparison too, so neither replaces the other,
    and judging the saved runs again replaces each its own."""
    out, history = tmp_path / "latest", tmp_path / "history.jsonl"
    plan = _eval_plan(tmp_path, out, {"gsm_style": 100}, cache_off=True)
    runs = _pair("gsm_style", 100) + [
        replace(r, record=replace(r.record, arm="cache-off")) for r in _pair("gsm_style", 100)[:1]
    ]
    options = RunOptions(
        thresholds=Thresholds(resamples=200), kill_matrix=None, fault_effects=None, release_matrix=None, history=history
    )
    job = {"run": {"id": "job-1", "recorded at": "2026-02-01T00:00:00+00:00"}}
    assert finish(plan, runs, options, job) == 0
    assert [json.loads(line)["verdict"] for line in history.read_text().splitlines()] == ["AMBER", "AMBER"]  # N=100
    assert finish(plan, runs, replace(options, thresholds=Thresholds(resamples=200, max_mde=0.2)), job) == 0
    records = [json.loads(line) for line in history.read_text().splitlines()]
    assert [(r["run_id"], r["verdict"]) for r in records] == [
        (f"job-1 {MODEL}/on-vs-off", "GREEN"),
        (f"job-1 {MODEL}/cache-off-vs-on", "GREEN"),
    ]
    assert [(r["provenance"]["arms"]["on"]["arm"], r["provenance"]["arms"]["off"]["arm"]) for r in records] == [
        ("on", "off"),
        ("cache-off", "on"),
    ]
    assert records[0]["provenance"]["run"]["id"] == "job-1"  # the job's own id, as its pages show it
    assert len({load_history(history).entries[i].series for i in (0, 1)}) == 2  # each comparison its own trend
    overview = (out / "index.html").read_text()
    assert "main job: graphs on vs off, prefix cache off vs on" in overview and "cache-off vs on" in overview
    assert f"history: {history} (1 run(s) of" in capsys.readouterr().out


def test_history_skips_damaged_lines_and_keeps_series_apart(tmp_path) -> None:
    history = tmp_path / "history.jsonl"
    history.write_text("{not json\n")
    t = Thresholds(resamples=200)
    nightly = _pair("gsm_style", 100)
    demo = _pair("gsm_style", 100, broken=set(range(0, 100, 3)), fault="pad-swa-loc-not-zeroed")
    plan = _eval_plan(tmp_path, tmp_path / "out", {"gsm_style": 100})
    options = RunOptions(thresholds=t, kill_matrix=None, fault_effects=None, release_matrix=None, history=history)
    for i, runs in enumerate([nightly, demo, nightly]):
        finish(plan, runs, options, {"run": {"id": f"r{i}", "recorded at": f"2026-02-0{i + 1}T00:00:00+00:00"}})
    loaded = load_history(history)
    assert loaded.unreadable == 1 and [e.run_id for e in loaded.entries] == ["r0", "r1", "r2"]
    assert loaded.entries[1].series != loaded.entries[0].series == loaded.entries[2].series
    page = _parse((tmp_path / "out" / "index.html").read_text())
    rows = page.root.find("div", id="trend-gsm_style").find_all("tr", class_="trend-row")
    assert [r.attrs["data-index"] for r in rows] == ["2", "1"]  # the fault demo is not part of the nightly trend
    assert not any(r.attrs["data-changed-from"] for r in rows)
    note = page.root.find("section", id="trend").text()
    assert "1 run(s) of other series not shown" in note and "1 unreadable history line(s) skipped" in note


# ------------------------------------------------------------------ kill matrices and fault effects


def test_every_targets_kill_matrix_with_kill_classes(nightly) -> None:
    _, _, _, page, _ = nightly
    km = page.root.find("section", id="kill-matrix")
    targets = {div.attrs["data-target"]: div for div in km.find_all("div", class_="km-target")}
    assert set(targets) == {"harness", "sglang"}
    long_id = "swa-window-off-by-one-in-the-decode-path-of-the-hybrid-pool-translation"
    row = next(r for r in targets["harness"].find_all("tr", class_="fault-row") if r.attrs["data-fault"] == long_id)
    cells = row.find_all("td")
    assert cells[3].attrs["data-kill-class"] == "behavioural" and cells[4].attrs["data-kill-class"] == "structural"
    short = LONG_TEST.split("/")[-1]  # the matrix names a test by its file's part of the node id
    assert cells[3].attrs["title"].startswith(short)  # the whole first failure on hover
    assert cells[3].find("span", class_="small").text().endswith("…")  # the cell shows it shortened
    assert cells[3].find("span", class_="test").text() == f"{short} [test_graph_vs_eager.py:7]"
    sglang_rows = targets["sglang"].find_all("tr", class_="fault-row")
    assert [r.attrs["data-fault"] for r in sglang_rows] == ["swa-window-off-by-one"]
    assert all(c.attrs["data-kill-class"] == "" for c in sglang_rows[0].find_all("td")[3:])


def test_kill_matrix_files_are_found_per_target(tmp_path) -> None:
    primary = tmp_path / "kill-matrix.json"
    assert load_kill_matrices(primary) == [] and load_kill_matrices(None) == []
    (tmp_path / "kill-matrix-sglang.json").write_text(json.dumps({"clean": {}, "faults": []}))
    (tmp_path / "kill-matrix-broken.json").write_text("{")
    found = {m.target: m for m in load_kill_matrices(primary)}
    assert set(found) == {"sglang", "broken"} and found["sglang"].matrix == KillMatrix(schema_version=1)
    assert found["broken"].matrix is None and "JSONDecodeError" in found["broken"].error
    primary.write_text(json.dumps({"target": "harness", "clean": {}, "faults": []}))
    assert [m.target for m in load_kill_matrices(primary)] == ["harness", "broken", "sglang"]


def test_a_test_impact_matrix_shows_unreached_and_not_run_cells(tmp_path) -> None:
    from harness.report.views import kill_matrix_view

    killed = {"status": "killed", "kill_class": "behavioural", "first_failure": "t.py::x [t.py:1]: AssertionError"}
    unreached = {"status": "unreached", "kill_class": None, "first_failure": None}
    matrix = {
        "target": "harness",
        "mode": "impact",
        "suites": ["a", "b"],
        "clean": {"a": {"status": "passed"}, "b": {"status": "passed"}},
        "faults": [
            {"id": "f1", "suites": {"a": killed, "b": {"status": "not run", "kill_class": None}}},
            {"id": "f2", "suites": {"a": unreached, "b": unreached}},
        ],
    }
    (tmp_path / "kill-matrix.json").write_text(json.dumps(matrix))
    view = kill_matrix_view(load_kill_matrices(tmp_path / "kill-matrix.json")[0])
    assert [row["outcome"] for row in view["rows"]] == ["killed", "unreached"]
    assert view["summary"].startswith("1 of 2 faults killed by at least one suite, 1 unreached")
    assert not view["all_killed"]


def test_a_kill_matrix_of_an_unexpected_shape_is_unreadable_not_a_failed_report(tmp_path) -> None:
    (tmp_path / "kill-matrix.json").write_text(json.dumps({"clean": {}, "faults": [["not", "a", "fault"]]}))
    [found] = load_kill_matrices(tmp_path / "kill-matrix.json")
    assert found.matrix is None and found.error.startswith("malformed: AttributeError"), found.error


def test_fault_effect_table(nightly, tmp_path) -> None:
    _, _, _, page, _ = nightly
    rows = page.root.find("section", id="fault-effects").find_all("tr", class_="effect-row")
    assert [r.attrs["data-fault"] for r in rows] == ["pad-swa-loc-not-zeroed", "capture-after-warm-cache"]
    assert "-12.4 pp" in rows[0].text() and rows[0].find("span", class_="badge-RED")
    label = " ".join(page.root.find(id="fault-effects-label").text().split())  # another run's numbers, said so
    assert label.startswith(
        "Measured by python -m bench.fault_effects, not by this run on 2026-11-23, the harness "
        "engine on gemma2-tiny-swa, gemma3-tiny-swa at N = gsm_style 200, aime_style 100"
    )
    assert label.endswith("Source: fault-effects.json (outside the checkout).")  # no machine paths on a page
    assert load_fault_effects(tmp_path / "absent.json") is None
    (tmp_path / "bad.json").write_text(json.dumps({"fault": "x"}))
    assert load_fault_effects(tmp_path / "bad.json").error.startswith("expected a list")


def test_release_matrix_section(nightly, tmp_path) -> None:
    _, _, _, page, _ = nightly
    rows = page.root.find("section", id="sglang-releases").find_all("tr", class_="release-row")
    assert [r.attrs["data-release"] for r in rows] == ["0.5.11", "0.5.99", "0.6.0"]
    cells = rows[0].find_all("td")
    assert [c.text().strip() for c in cells[1:3]] == ["passed 9", "failed 1"]
    assert "CPU-unreachable" in cells[1].attrs["title"] and "#24743" in cells[2].attrs["title"]
    assert [c.text().strip() for c in rows[1].find_all("td")[1:3]] == ["error", "error"]
    assert [c.text().strip() for c in rows[2].find_all("td")[1:3]] == ["passed 8", "not run"]
    assert load_release_matrix(tmp_path / "absent.json") is None
    (tmp_path / "bad.json").write_text(json.dumps([1]))
    assert load_release_matrix(tmp_path / "bad.json").error.startswith("expected an object with rows")


def test_the_job_shows_the_mutation_run_beside_the_kill_matrices(nightly) -> None:
    _, _, html, page, _ = nightly  # the rest of the section: tests/test_report_mutants.py
    assert [
        d.attrs["data-target"] for d in page.root.find("section", id="mutants").find_all("div", class_="mut-target")
    ] == ["sglang"]
    assert 'href="#mutants"' in html and page.root.find("section", id="verdict").find("div", class_="mutants-count")


def test_long_errors_are_folded_not_spilled(nightly) -> None:
    _, _, html, page, _ = nightly
    reason = page.root.find(id="verdict-reason")
    shown = [li for li in reason.find_all("li") if "aime_style" in li.text()][0]
    summary_line = shown.text().split("full text")[0]
    assert len(summary_line) < 300 and "swa_gsm_style" not in summary_line  # the sample indices stay folded
    assert TIMEOUT_ERROR in shown.find("details").find("pre").text()
    meta = next(r for r in page.root.find_all("tr", class_="run-row")).find("td", class_="meta")
    keys = [th.text() for th in meta.find("table", class_="kv").find_all("th")]
    assert {"mode", "graphs", "server_start_s"} <= set(keys)  # key/value rows, not JSON
    assert meta.find("details").find("summary").text().startswith("engine")
    assert '"requests_served"' not in html  # meta is never dumped as raw JSON


# ------------------------------------------------------------------ in a browser


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _browser_or_skip() -> str:
    browser = _chromium()
    if browser is None:
        pytest.skip("headless Chromium not installed (Debian package: chromium)")
    return browser


def _dump_dom(browser: str, page: Path, profile: Path, width: int = 1400, height: int = 900) -> str:
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "--dump-dom",
        page.resolve().as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_chromium_renders_the_verdict(report, tmp_path) -> None:
    browser = _browser_or_skip()
    path, _, _ = report
    dom = _parse(_dump_dom(browser, path, tmp_path / "profile"))
    assert dom.root.find(id="verdict-word").text().strip() == "NO VERDICT"
    assert "script" not in dom.start_tags  # the browser did not turn model text into a script either
    assert len(dom.root.find_all("tr", class_="suite-row")) == 2


# Measures the page as laid out, first as delivered, then with every <details> opened, and writes
# the numbers into the DOM, where --dump-dom brings them out. Only ever added to a test copy.
LAYOUT_PROBE = """<script>
(function () {
  const doc = document.scrollingElement;
  function measure() {
    const word = document.getElementById("verdict-word").getBoundingClientRect();
    const wide = [];
    for (const el of document.body.querySelectorAll("*")) {
      const r = el.getBoundingClientRect();
      if (r.width > 0 && r.right > doc.clientWidth + 0.5 && !el.closest(".table-wrap")) {
        wide.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + " right=" + Math.round(r.right));
      }
    }
    return {scrollWidth: doc.scrollWidth, clientWidth: doc.clientWidth, innerWidth: window.innerWidth,
            innerHeight: window.innerHeight, verdict: {top: word.top, bottom: word.bottom, right: word.right},
            wide: wide.slice(0, 12)};
  }
  const closed = measure();
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  const opened = measure();
  const out = document.createElement("pre");
  out.id = "layout-probe";
  out.textContent = JSON.stringify({closed: closed, opened: opened});
  document.body.appendChild(out);
})();
</script>"""


@pytest.mark.parametrize("width", [1400, 800])
def test_chromium_layout_has_no_horizontal_overflow_and_the_verdict_on_the_first_screen(
    nightly, tmp_path, width
) -> None:
    browser = _browser_or_skip()
    _, _, html, _, _ = nightly
    probe_page = tmp_path / "probe.html"
    probe_page.write_text(html.replace("</body>", LAYOUT_PROBE + "\n</body>"), encoding="utf-8")
    dom = _parse(_dump_dom(browser, probe_page, tmp_path / "profile", width=width, height=900))
    result = json.loads(dom.root.find("pre", id="layout-probe").text())
    for state, m in result.items():
        assert m["innerWidth"] == width, m  # the page was laid out at the width under test
        assert m["scrollWidth"] <= m["clientWidth"], f"{state}: horizontal overflow at {width} px: {m['wide']}"
        assert not m["wide"], f"{state}: elements wider than the page at {width} px: {m['wide']}"
    verdict = result["closed"]["verdict"]
    assert 0 <= verdict["top"] and verdict["bottom"] <= result["closed"]["innerHeight"]  # on the first screen
    assert verdict["right"] <= result["closed"]["clientWidth"]


def test_details_are_readable_values_not_json_or_python_spellings() -> None:
    """It used to show double-encoded JSON, an epoch started_at, unrounded floats and Python None."""
    from harness.report.views import kv_rows

    rows = {
        r["key"]: r["full"]
        for r in kv_rows(
            {
                "started_at": 1764165600.25,
                "server_start_s": 37.519999,
                "fault": None,
                "ok": True,
                "bs": [1, 2, 4],
                "override": '{"rope": {"theta": 10000.0}}',
                "empty": "{}",
                "name": "x",
            }
        )
    }
    assert rows == {
        "started_at": "2025-11-26 14:00:00 UTC",
        "server_start_s": "37.52",
        "fault": "—",
        "ok": "yes",
        "bs": "1, 2, 4",
        "override.rope.theta": "10000",
        "empty": "—",
        "name": "x",
    }


def test_no_machine_paths_on_the_page(report) -> None:
    """It used to show the checkout's absolute paths (kill matrices, fault effects, server caches, commands)."""
    from harness.paths import REPO
    from harness.report.views import portable

    assert (
        portable(f"python -m lm_eval --include_path {REPO}/suites/accuracy --cache {Path.home()}/.cache/sglang")
        == "python -m lm_eval --include_path suites/accuracy --cache ~/.cache/sglang"
    )
    _, html, _ = report
    assert f"{REPO}/" not in html and f"{Path.home()}/" not in html


def test_a_stress_arm_compared_as_on_is_named_in_the_arms_line() -> None:
    from harness.report.inputs import Provenance
    from harness.report.views import provenance_glance

    arms = {
        "on": {"arm": "swa-pool-reuse", "graphs": "on", "fault": "none"},
        "off": {"arm": "on", "graphs": "on", "fault": "none"},
    }
    line = next(r["text"] for r in provenance_glance(Provenance.parse({"arms": arms})) if r["label"] == "arms")
    assert line == "ON: swa-pool-reuse, graphs on · OFF: on, graphs on"  # not "ON: graphs on · OFF: graphs on"


def test_the_overview_shows_each_arms_server_counters(tmp_path) -> None:
    """What a server counted over its run (prefix-cache hits, preemptions, evictions) under its arm, in the names every
    server kind reports; a counter a kind does not report is left out, never shown as 0."""
    from harness.report.overview import OverviewModel, counters_line, render_overview

    vllm = {"prefix_cache_hit_tokens": 31008, "prefix_cache_query_tokens": 43299, "preemptions": 65}
    vllm["kv_blocks_reallocated"] = 2561
    assert counters_line(vllm) == (
        "prefix cache 31,008 / 43,299 prompt tokens (72%) · preemptions 65 · blocks handed out again 2,561"
    )
    assert (
        counters_line({"prefix_cache_query_tokens": 0, "requests": 200}) == "prefix cache: no prompt tokens asked (off)"
    )
    assert counters_line({"requests": 3}) == counters_line(None) == "—"
    on, off = _pair("gsm_style", 20)
    on = replace(on, record=replace(on.record, counters=vllm))
    model = OverviewModel(
        "m", [("on", "", ""), ("off", "", "")], ["gsm_style"], {("on", "gsm_style"): on, ("off", "gsm_style"): off}, []
    )
    [row] = [tr for tr in _parse(render_overview([model])).root.find_all("tr") if "server counters" in tr.text()]
    assert [td.text() for td in row.find_all("td")] == [counters_line(vllm), "—"]
