"""The HTML report: one self-contained file, verdict on top, escaped model text, no network."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from harness.evals.compare import Thresholds, compare_runs, summarize
from harness.evals.results import ItemResult, RunResult
from harness.report import render_html, render_report
from harness.report.render import TEMPLATES

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
        out.append(ItemResult(f"{suite}/{i}", f"Question {i}: <b>{i}</b> & 1?", str(i + 1), response, str(i + 1) if correct else "0", correct))  # fmt: skip
    return out


def _scenario() -> tuple[list, list[RunResult]]:
    """gsm_style: GREEN with flips carrying a <script>; aime_style: ON run died (INCOMPLETE)."""
    gsm_on = RunResult("gsm_style", "tape", "gemma2-tiny-swa", True, None, _items("gsm_style", 500, broken={1, 2, 5}, fixed={4, 8}), 30.0, {"port": 30001})  # fmt: skip
    gsm_off = RunResult("gsm_style", "off", "gemma2-tiny-swa", True, None, _items("gsm_style", 500), 41.0, {"port": 30002})  # fmt: skip
    aime_on = RunResult("aime_style", "tape", "gemma2-tiny-swa", False, "server died: exit 137 & <no stderr>", _items("aime_style", 7), 3.0, {})  # fmt: skip
    aime_off = RunResult("aime_style", "off", "gemma2-tiny-swa", True, None, _items("aime_style", 200), 20.0, {})
    t = Thresholds(resamples=1000)
    comparisons = [compare_runs(gsm_on, gsm_off, thresholds=t), compare_runs(aime_on, aime_off, thresholds=t)]
    return comparisons, [gsm_on, gsm_off, aime_on, aime_off]


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, str, _TreeBuilder]:
    comparisons, runs = _scenario()
    out = tmp_path_factory.mktemp("report")
    path = render_report(comparisons, runs, summary=summarize(comparisons), kill_matrix=KILL_MATRIX, provenance=PROVENANCE,
                         out_dir=out / "latest")
    html = path.read_text(encoding="utf-8")
    return path, html, _parse(html)


def test_writes_one_index_html(report) -> None:
    path, html, _ = report
    assert path.name == "index.html"
    assert [p.name for p in path.parent.iterdir()] == ["index.html"]
    assert html.startswith("<!DOCTYPE html>")


def test_verdict_is_at_the_top_with_its_reason(report) -> None:
    _, html, page = report
    section = page.root.find("section", id="verdict")
    assert section.attrs["data-verdict"] == "RED"
    assert page.root.find(id="verdict-word").text().strip() == "RED"
    reason = page.root.find(id="verdict-reason").text()
    assert "aime_style" in reason and "incomplete" in reason and "server died: exit 137 & <no stderr>" in reason
    assert html.index('id="verdict"') < html.index('id="suites"')
    assert "fault kill matrix: 2 of 2 faults killed" in section.text()


def test_suite_rows(report) -> None:
    _, _, page = report
    rows = {row.attrs["data-suite"]: row for row in page.root.find_all("tr", class_="suite-row")}
    assert set(rows) == {"gsm_style", "aime_style"}
    gsm = rows["gsm_style"]
    cells = [td.text().strip() for td in gsm.find_all("td")]
    assert gsm.attrs["data-verdict"] == "GREEN"
    assert cells[2] == "500"
    assert cells[3].startswith("74.8 %") and "[70.8 %, 78.4 %]" in cells[3]  # 375 - 3 broken + 2 fixed
    assert cells[4].startswith("75.0 %")
    assert cells[5].startswith("-0.2 pp")
    assert cells[6] == "2 / 3"
    aime = rows["aime_style"]
    assert aime.attrs["data-verdict"] == "RED"
    assert "INCOMPLETE" in aime.text() and "%" not in aime.text()  # never an accuracy


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
    assert sorted(d.attrs["data-item"] for d in flips) == ["gsm_style/1", "gsm_style/2", "gsm_style/4", "gsm_style/5", "gsm_style/8"]  # fmt: skip
    assert flips[0].attrs["data-direction"] == "ON broke"  # broken ones first
    one = [d for d in flips if d.attrs["data-item"] == "gsm_style/1"][0]
    on_pre, off_pre = one.find("pre", class_="on"), one.find("pre", class_="off")
    common = "Step: 1 + 1 = "
    assert on_pre.text() == f"{common}{SCRIPT} & oops\n#### 0"
    assert on_pre.find("mark").text() == f"{SCRIPT} & oops\n#### 0"
    assert off_pre.find("mark").text() == "2 & done\n#### 2"
    assert "gold 2" in " ".join(one.find("div", class_="diff-head").text().split())


def test_forest_plot_is_inline_svg(report) -> None:
    _, _, page = report
    svg = page.root.find("section", id="forest").find("svg")
    rows = {g.attrs["data-suite"]: g for g in svg.find_all("g", class_="forest-row")}
    assert set(rows) == {"gsm_style", "aime_style"}
    assert rows["gsm_style"].find_all("rect") and "INCOMPLETE" in rows["aime_style"].text()
    assert svg.find_all("line", class_="zero")


def test_kill_matrix_and_provenance(report) -> None:
    _, html, page = report
    km = page.root.find("section", id="kill-matrix")
    faults = {row.attrs["data-fault"]: row for row in km.find_all("tr", class_="fault-row")}
    assert set(faults) == {"swa-window-off-by-one", "stale-graph-buffer"}
    cells = faults["swa-window-off-by-one"].find_all("td")
    assert "killed" in cells[3].attrs["class"] and cells[3].attrs["title"] == "assert accuracy drop <= 0.02 & p < 0.05"
    assert "survived" in cells[4].attrs["class"]
    assert "error" in faults["stale-graph-buffer"].find_all("td")[4].attrs["class"]
    prov = {th.text(): th.parent.find("td").text() for th in page.root.find("section", id="provenance").find_all("th")}
    assert prov["commit"] == "0123abcd" and prov["versions.torch"] == "2.13.0+cpu" and prov["seeds"] == "[1001, 2001]"
    assert prov["max_drop"] == "0.02"


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
    on = RunResult("gsm_style", "cuda", "m", True, None, _items("gsm_style", 500), 1.0, {})
    off = RunResult("gsm_style", "off", "m", True, None, _items("gsm_style", 500), 1.0, {})
    comparisons = [compare_runs(on, off)]
    html = render_html(comparisons, [on, off], summary=summarize(comparisons), provenance={}, generated_at="then")
    page = _parse(html)
    assert page.root.find(id="verdict-word").text().strip() == "GREEN"
    assert not page.root.find_all(id="kill-matrix")
    assert "then" in html and "no provenance recorded" in html


def test_templates_ship_with_the_package() -> None:
    assert (TEMPLATES / "report.html.j2").is_file()
    assert TEMPLATES.parent.name == "report" and TEMPLATES.parent.parent.name == "harness"


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def test_chromium_renders_the_verdict(report, tmp_path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("headless Chromium not installed (Debian package: chromium)")
    path, _, _ = report
    command = [
        browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
        "--dump-dom", path.resolve().as_uri(),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = _parse(done.stdout)
    assert dom.root.find(id="verdict-word").text().strip() == "RED"
    assert "script" not in dom.start_tags  # the browser did not turn model text into a script either
    assert len(dom.root.find_all("tr", class_="suite-row")) == 2
