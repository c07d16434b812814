"""``swa-harness check`` names a catalog fault only when the failure's message matches one's kill message (at least
``MATCH_THRESHOLD``, calibrated by ``bench/check_threshold.py``); below it, "no catalog fault matches" and the
nearest with its score. Its server smoke is the server file's tests marked ``check_smoke``, never a -k name match."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from harness.jobs import check
from harness.jobs.check import MATCH_THRESHOLD, describe_resemblance, message_similarity, resembles
from harness.env import SGLANG_SERVER_ENV, VLLM_SERVER_ENV
from harness.kill_record import KillMatrix, VerdictLine
from harness.paths import REPO

RADIX = "suites/prefix/test_prefix_cache_machine.py::test_prefix_cache_machine[page4-window6]"
POOL = "suites/pool/test_allocator_state_machine.py::test_allocator_state_machine[1]"
TOMBSTONES = (
    "AssertionError: request 0: right after its checkpoint, a match of the 12 inserted tokens finds 0: the leaf it "
    "inserted cannot end a match (its last window is not live) assert 0 == 12"
)
MAPPING = "AssertionError: slot 48 freed but its SWA mapping still holds 17 assert 17 == 0"


def _killed(nodeid: str, message: str) -> dict:
    return {"status": "killed", "kill_class": "behavioural", "failure": {"nodeid": nodeid, "message": message}}


MATRIX = KillMatrix.from_json(
    {
        "schema_version": 2,
        "faults": [
            {"id": "tombstones", "seed": "#29860", "suites": {"prefix": _killed(RADIX, TOMBSTONES)}},
            {"id": "keeps-mapping", "seed": "#1", "suites": {"pool": _killed(POOL, MAPPING)}},
            {"id": "keeps-mapping-too", "seed": "#2", "suites": {"pool": _killed(POOL, MAPPING.replace("48", "9"))}},
        ],
    }
)


def test_a_same_test_failure_with_another_message_matches_no_catalog_fault() -> None:
    # What the issue saw: a radix-cache regression outside the catalog failed at the test that killed the tombstones
    # fault, with a message of its own, and check said it looked like that fault.
    message = "AssertionError: request 1: a match of the 8 inserted tokens holds 3 SWA slots that were evicted"
    failure = VerdictLine(RADIX, "kill", message=message + " assert 3 == 0")
    like = resembles(failure, MATRIX)
    assert like is not None and not like.named
    assert (like.fault, like.how) == ("tombstones", "same test") and like.similarity < MATCH_THRESHOLD
    [line] = describe_resemblance(like)
    assert line.startswith(f"  no catalog fault matches (message similarity below {MATCH_THRESHOLD}): nearest ")
    assert f"tombstones (#29860) at {like.similarity}, the same test killed it" in line


def test_the_nearest_by_message_is_shown_beside_the_fault_the_same_test_killed() -> None:
    failure = VerdictLine(RADIX, "kill", message="AssertionError: slot 3 freed but the SWA pool still holds it")
    like = resembles(failure, MATRIX)
    assert like is not None and not like.named and like.how == "closest message"
    assert like.fault in ("keeps-mapping", "keeps-mapping-too") and like.same_test is not None
    assert like.same_test[0] == "tombstones"
    [line] = describe_resemblance(like)
    assert ", another test killed it; the same test killed tombstones (#29860) at " in line


def test_a_close_message_names_the_fault_and_its_siblings() -> None:
    # A rerun of the tombstones fault: the same assertion, other numbers drawn.
    rerun = VerdictLine(RADIX, "kill", message=TOMBSTONES.replace("12", "16").replace("request 0", "request 3"))
    like = resembles(rerun, MATRIX)
    assert like is not None and like.named and (like.fault, like.how, like.similarity) == ("tombstones", "same test", 1)
    assert describe_resemblance(like) == [
        "  looks like catalog fault tombstones (#29860): the same test killed it, message similarity 1.0"
        f" (a match is {MATCH_THRESHOLD} or more)"
    ]
    # Two faults fail one assertion: the one named, the other beside it.
    like = resembles(VerdictLine(POOL, "kill", message=MAPPING.replace("48", "50")), MATRIX)
    assert like is not None and like.named and like.also == (("keeps-mapping-too", 1.0),)
    assert describe_resemblance(like)[1] == "  as close: keeps-mapping-too 1.0"


def test_a_fault_whose_code_the_checkout_keeps_is_never_named_however_alike_the_failure() -> None:
    # What check_mutants saw: a mutant of SGLang's match validator failed at the test that killed #34870, with its
    # message (0.91), while the checkout left #34870's function as released.
    rerun = VerdictLine(RADIX, "kill", message=TOMBSTONES.replace("12", "16"))
    like = resembles(rerun, MATRIX, kept=frozenset({"tombstones"}))
    assert like is not None and not like.named and like.code_kept
    assert (like.fault, like.how, like.similarity) == ("tombstones", "same test", 1)
    assert describe_resemblance(like) == [
        "  no catalog fault matches: it fails as tombstones (#29860) failed (the same test killed it, message similarity"
        " 1.0), but the checkout leaves that fault's functions as released: another change with its symptom"
    ]
    # Of two siblings failing alike, the one whose code the checkout keeps steps aside for the other.
    like = resembles(VerdictLine(POOL, "kill", message=MAPPING), MATRIX, kept=frozenset({"keeps-mapping"}))
    assert like is not None and like.named and like.fault == "keeps-mapping-too" and like.also == ()


def test_a_checkout_is_read_against_the_installed_release_function_by_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed, checkout = tmp_path / "site" / "eng", tmp_path / "checkout" / "eng"
    for root in (installed, checkout):
        root.mkdir(parents=True)
        (root / "__init__.py").write_text("")
        (root / "pool.py").write_text(
            "class Pool:\n    def free(self):\n        return 1\n\n\ndef alloc():\n    return 2\n"
        )
    (checkout / "pool.py").write_text((installed / "pool.py").read_text().replace("return 2", "return 3"))
    code = {"frees": ("eng.pool.Pool.free",), "allocs": ("eng.pool.alloc",), "gone": ("eng.cache.insert",)}
    monkeypatch.setitem(check.FAULT_CODE, "sglang", lambda: code)
    real = check.importlib.util.find_spec
    monkeypatch.setattr(
        check.importlib.util,
        "find_spec",
        lambda name, *a: (
            importlib.machinery.ModuleSpec(name, None, origin=str(installed / "__init__.py"))
            if name == "sglang"
            else real(name, *a)
        ),
    )
    changes = check.fault_code_changes("sglang", check.UnderTest("checkout", sys.executable, str(checkout.parent)))
    assert changes.touched == ("allocs",)  # its function differs
    assert changes.kept == frozenset({"frees"})  # as released; "gone": its module is in neither, nothing is said
    release = check.fault_code_changes("sglang", check.UnderTest("release 0.5.23", sys.executable, None))
    assert release == check.CodeChanges()


def test_similarity_masks_what_changes_between_runs_of_one_fault() -> None:
    assert message_similarity("slot 48 at 0x7f26220597c0, key 'cae0f42b04937064'", "slot 6 at 0x7f00, key 'e55a'") < 1
    assert (
        message_similarity("slot 48 at 0x7f26220597c0, key 'cae0f42b04937064'", "slot 6 at 0x7f00, key '0badf00d'") == 1
    )
    assert message_similarity("padded rows wrote slots [4]", "the SWA mapping kept slot 4") < MATCH_THRESHOLD


@pytest.mark.parametrize(
    "message,said",
    [
        (TOMBSTONES.replace("12", "7"), "looks like catalog fault tombstones (#29860): the same test killed it"),
        ("AssertionError: the SWA evictable size went negative", "no catalog fault matches"),
    ],
)
def test_check_prints_the_match_or_that_none_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, message: str, said: str
) -> None:
    saved = tmp_path / "kill-matrix.json"
    saved.write_text(json.dumps(MATRIX.to_json()))
    failure = VerdictLine(RADIX, "kill", where="test_prefix_cache_machine.py:88", message=message)
    monkeypatch.setattr(check, "_run_stage", lambda name, *a, **kw: check.StageResult(name, 3, 1.0, failure))
    lines: list[str] = []
    who = check.UnderTest("release 0.5.23", sys.executable, None)
    assert check.check(replace(check._sglang(), matrix=saved), who, server=False, out=lines.append) == 1
    assert said in lines[-1], lines


# -- the server smoke: a registered marker selects it ----------------------------------------------------------------
TARGETS = (check._sglang(), check._vllm())


def test_each_engines_server_smoke_is_its_server_files_registered_check_smoke_marker() -> None:
    markers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert "check_smoke" in {m.split(":")[0].split("(")[0].strip() for m in markers}
    for target in TARGETS:
        path, *selection = target.smoke
        assert (REPO / path).is_file() and path.startswith("suites/servers/test_"), target.smoke
        assert selection == ["-m", "check_smoke"], target.smoke  # a marker, never -k name fragments


@pytest.fixture(scope="module")
def smoke_collected() -> list[str]:
    """The node ids check's smoke selections collect (no engine is imported to collect them: the files skip)."""
    [selection] = {target.smoke[1:] for target in TARGETS}
    env = {k: v for k, v in os.environ.items() if k not in (SGLANG_SERVER_ENV, VLLM_SERVER_ENV)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *(t.smoke[0] for t in TARGETS), *selection, "--collect-only", "-q"]
        + ["-p", "no:cacheprovider"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line for line in proc.stdout.splitlines() if "::" in line]


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.engine)
def test_the_smoke_marker_selects_tests_of_each_server_file(target: check.CheckTarget, smoke_collected) -> None:
    selected = [nodeid for nodeid in smoke_collected if nodeid.startswith(f"{target.smoke[0]}::")]
    assert selected, f"-m check_smoke selects no test of {target.smoke[0]}"
    if target.engine == "vllm":  # check_smoke(ckpt=...): Gemma2's cases only, not the other checkpoint's
        assert all("[gemma2-tiny-swa-" in nodeid for nodeid in selected), selected
