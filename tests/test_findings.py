"""harness/findings.py without any engine: the registry points at files that exist, the scripts import no harness,
junit outcomes read right, and per-release outcomes become the rows the release matrices print."""

from __future__ import annotations

import ast
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from packaging.version import Version

from harness import findings
from harness.findings import FINDINGS, Finding, describe, finding_rows, markdown, outcome_of, outcomes_from_junit
from harness.paths import REPO

# What a docs/repro script may import: the engines, torch, transformers, and the standard library.
ENGINES_AND_DEPS = {"sglang", "vllm", "torch", "transformers", "sgl_kernel", "torchvision"}


def test_every_finding_has_its_test_and_script_and_the_test_is_marked():
    for found in FINDINGS:
        assert (REPO / found.script).is_file(), found.script
        source = (REPO / found.test_file).read_text()
        tree = ast.parse(source)
        marked = [
            node
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef) and node.name == found.test_name
            for deco in node.decorator_list
            if isinstance(deco, ast.Call)
            and ast.unparse(deco.func) == "pytest.mark.finding"
            and ast.literal_eval(deco.args[0]) == found.number
        ]
        assert marked, f"{found.test} is not a function marked @pytest.mark.finding({found.number})"
        pinned = findings.PINNED[found.engine]
        assert found.has_it and (pinned in found.has_it or all(Version(r) < Version(pinned) for r in found.has_it)), (
            f"#{found.number}: the pinned release must be listed with the bug (its reproducer is a strict xfail "
            f"there), or every listed release be older (fixed before it: the reproducer guards the fix there)"
        )


@pytest.mark.parametrize("found", FINDINGS, ids=[f"finding-{f.number}" for f in FINDINGS])
def test_a_script_imports_only_the_engine_torch_transformers_and_the_stdlib(found: Finding):
    tree = ast.parse((REPO / found.script).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            imported.add(node.module.split(".")[0])
    foreign = imported - ENGINES_AND_DEPS - set(sys.stdlib_module_names) - {"__future__"}
    assert not foreign, f"{found.script} imports {sorted(foreign)}: a standalone script imports no harness"
    assert 'if __name__ == "__main__":' in (REPO / found.script).read_text()


def _case(inner: str = "", name: str = "test_x", file: str = "suites/findings/test_x.py") -> ET.Element:
    return ET.fromstring(f'<testcase file="{file}" name="{name}">{inner}</testcase>')


@pytest.mark.parametrize(
    ("inner", "outcome"),
    [
        ("", "fixed"),
        ('<skipped type="pytest.xfail" message="finding #8 present in sglang 0.5.23"/>', "present"),
        ('<skipped type="pytest.skip" message="sglang 0.5.11: CPU-unreachable"/>', "n/a"),
        ('<failure message="[XPASS(strict)] finding #8 present in sglang 0.5.23"/>', "fixed"),
        ('<failure message="AttributeError: no alloc_decode">trace</failure>', "broken"),
        ('<error message="fixture failed"/>', "broken"),
    ],
)
def test_a_junit_case_reads_as_its_outcome(inner: str, outcome: str):
    assert outcome_of(_case(inner)) == outcome


def test_outcomes_from_junit_pick_out_the_engines_reproducers(tmp_path: Path):
    eight, seven = findings.finding(8), findings.finding(7)
    xml = tmp_path / "junit.xml"
    xml.write_text(
        "<testsuites><testsuite>"
        + ET.tostring(_case('<skipped type="pytest.xfail" message="x"/>', eight.test_name, eight.test_file)).decode()
        + ET.tostring(_case("", "test_other", eight.test_file)).decode()
        + ET.tostring(_case("", seven.test_name, seven.test_file)).decode()
        + "</testsuite></testsuites>"
    )
    assert outcomes_from_junit(xml, "sglang") == {"8": "present"}
    assert outcomes_from_junit(xml, "vllm") == {"7": "fixed"}


def test_a_row_names_the_releases_with_the_bug_and_the_first_without():
    outcomes = {
        "0.5.11": {"8": "n/a"},
        "0.5.20": {"8": "present"},
        "0.5.21": {"8": "present"},
        "0.5.22": {"8": "fixed"},
        "0.5.23": {"8": "fixed"},
    }
    (row,) = [r for r in finding_rows("sglang", outcomes) if r.number == 8]
    assert row.has_it == ("0.5.20", "0.5.21")
    assert row.first_without_text == "0.5.22"
    assert row.not_applicable == ("0.5.11",)


def test_a_bug_in_the_newest_release_run_is_not_fixed_up_to_it():
    outcomes = {"0.5.9": {"4": "fixed"}, "0.5.10": {"4": "present"}, "0.5.23": {"4": "present"}}
    (row,) = [r for r in finding_rows("sglang", outcomes) if r.number == 4]
    assert row.first_without is None
    assert row.first_without_text == "not fixed up to 0.5.23"
    assert row.without == ("0.5.9",)  # older than the bug: not a fix


def test_a_regression_after_a_fix_counts_only_the_fix_after_the_newest_bug():
    outcomes = {"1.0": {"8": "present"}, "1.1": {"8": "fixed"}, "1.2": {"8": "present"}, "1.3": {"8": "fixed"}}
    (row,) = [r for r in finding_rows("sglang", outcomes) if r.number == 8]
    assert row.first_without == "1.3"


def test_releases_sort_by_version_not_text():
    outcomes = {"0.5.9": {"8": "present"}, "0.5.10": {"8": "fixed"}}
    (row,) = [r for r in finding_rows("sglang", outcomes) if r.number == 8]
    assert row.first_without == "0.5.10"


def test_the_markdown_table_has_a_row_per_finding_of_the_engine():
    rows = [
        {"release": "0.5.22", "findings": {"4": "present", "6": "n/a", "8": "present"}},
        {"release": "0.5.23", "findings": {"4": "present", "6": "present", "8": "broken"}},
        {"release": "0.5.21"},  # did not run the findings suite
    ]
    text = "\n".join(markdown("sglang", rows))
    assert "| #4 " in text and "| #6 " in text and "| #8 " in text and "| #7 " not in text
    assert "0.5.22-0.5.23 | not fixed up to 0.5.23" in text
    assert "**reproducer broke**: 0.5.23" in text


def test_what_an_outcome_means_depends_on_whether_the_release_is_listed():
    found = Finding(99, "sglang", "t", "suites/findings/x.py::test_y", "docs/repro/x.py", ("0.5.22", "0.5.23"))
    assert describe(found, "0.5.24", "fixed") == "finding #99 fixed in sglang 0.5.24"
    assert "older than every release listed" in describe(found, "0.5.11", "fixed")
    assert "no longer reproduces" in describe(found, "0.5.23", "fixed")
    assert "not yet listed" in describe(found, "0.5.24", "present")
    assert describe(found, "0.5.23", "present") == "finding #99 present in sglang 0.5.23"
