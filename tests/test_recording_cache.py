"""The kill matrix's clean recording kept and reused (``harness/faults/recording_cache.py``): reused while its key is
equal, recorded again when any one field differs (a test per field, the field named), ``--fresh`` always; the
digests behind the key move with what they cover and nothing else. No engine: the suite runs are a stub."""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path

import pytest

from harness.faults import matrix
from harness.faults.recording_cache import (
    TREE_CORE_ENV,
    Fingerprint,
    RecordingCache,
    engine_digest,
    suites_digest,
)
from tests.test_matrix_shards import stub_run_suite

PYTHON_CORE = ((TREE_CORE_ENV, "python"),)
FP = Fingerprint(
    target="sglang",
    engine="sglang 0.5.23 py:aaaa",
    suites="ssss",
    environ=(("SGLANG_INVARIANT_CHECK", "2"),),
    python="3.11.7",
    torch="2.13.0",
)


def _store(root: Path, fp: Fingerprint = FP, settings: tuple = ()) -> None:
    impact = root.parent / "impact.json"
    impact.write_text(json.dumps({"target": "sglang", "tests": [], "code": {}}))
    RecordingCache(root, fp).store(settings, {"pool": {"passed": 7}}, {"pool": impact}, 12.5)


def test_an_equal_key_reuses_the_stored_recording(tmp_path: Path) -> None:
    _store(tmp_path / "rec")
    found = RecordingCache(tmp_path / "rec", FP).lookup((), ["pool"])
    assert found.stored is not None and found.why == ""
    assert found.stored.outcomes == {"pool": {"passed": 7}} and found.stored.seconds == 12.5
    assert found.stored.key == FP.key(())


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("target", {"target": "vllm"}),
        ("engine", {"engine": "sglang 0.5.23 py:bbbb"}),  # one file of the installed package edited
        ("engine", {"engine": "sglang 0.5.22 py:aaaa"}),  # another release
        ("suites", {"suites": "tttt"}),
        ("tree_core", {"environ": (("SGLANG_INVARIANT_CHECK", "2"), (TREE_CORE_ENV, "python"))}),
        ("env", {"environ": (("SGLANG_INVARIANT_CHECK", "0"),)}),
        ("env", {"environ": (("SGLANG_INVARIANT_CHECK", "2"), ("SWA_HARNESS_SGLANG_PATCH", "p.yaml"))}),
        ("python", {"python": "3.11.9"}),
        ("torch", {"torch": "2.14.0"}),
    ],
)
def test_one_field_changed_records_again_and_names_it(tmp_path: Path, field: str, change: dict) -> None:
    _store(tmp_path / "rec")
    found = RecordingCache(tmp_path / "rec", dataclasses.replace(FP, **change)).lookup((), ["pool"])
    assert found.stored is None
    assert found.why.split(": ")[0] == field, found.why


def test_other_settings_are_another_recording(tmp_path: Path) -> None:
    _store(tmp_path / "rec")  # as it ships only
    cache = RecordingCache(tmp_path / "rec", FP)
    found = cache.lookup(PYTHON_CORE, ["pool"])
    assert found.stored is None and found.why.startswith("no recording stored")
    assert FP.key(PYTHON_CORE).settings == f"{TREE_CORE_ENV}=python"
    assert FP.key(PYTHON_CORE).tree_core == "python"  # the settings' value over the environment's
    _store(tmp_path / "rec", settings=PYTHON_CORE)
    assert cache.lookup(PYTHON_CORE, ["pool"]).stored is not None and cache.lookup((), ["pool"]).stored is not None


def test_fresh_a_missing_suite_and_a_half_written_entry_record_again(tmp_path: Path) -> None:
    _store(tmp_path / "rec")
    cache = RecordingCache(tmp_path / "rec", FP)
    assert cache.lookup((), ["pool"], fresh=True).why == "--fresh"
    assert "no suite layouts" in cache.lookup((), ["pool", "layouts"]).why
    (tmp_path / "rec" / "clean" / "key.json").unlink()  # written last: without it the entry does not count
    assert cache.lookup((), ["pool"]).stored is None


def test_the_variables_each_run_sets_itself_are_not_part_of_the_key() -> None:
    fp = Fingerprint.now(
        "harness", ("suites/pool",), environ={"SWA_HARNESS_SGLANG_FAULT": "x", "SGLANG_X": "1", "HOME": "/root"}
    )
    assert fp.environ == (("SGLANG_X", "1"),)


def test_the_engine_digest_moves_with_a_file_of_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "fake_engine_pkg"
    (package / "mem").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "mem" / "swa.py").write_text("def free(): return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    before = engine_digest(("fake_engine_pkg",))
    assert before.startswith("fake_engine_pkg ") and engine_digest(("fake_engine_pkg",)) == before
    (package / "mem" / "__pycache__").mkdir()
    (package / "mem" / "__pycache__" / "swa.cpython-311.pyc").write_bytes(b"x")
    assert engine_digest(("fake_engine_pkg",)) == before  # bytecode is not source
    (package / "mem" / "swa.py").write_text("def free(): return 0\n")
    assert engine_digest(("fake_engine_pkg",)) != before
    assert engine_digest(()) == ""  # the harness target: its code is in the suites digest


def test_the_suites_digest_follows_what_the_suites_import_and_nothing_else(tmp_path: Path) -> None:
    files = {
        "conftest.py": "",
        "pyproject.toml": "[tool.pytest.ini_options]\n",
        "suites/__init__.py": "",
        "suites/pool/__init__.py": "",
        "suites/pool/test_pool.py": "from harness.mem import pool\nfrom . import helpers\n",
        "suites/pool/helpers.py": "def load():\n    return __import__('harness.targets.sglang')\nT = 'harness.targets.fake:Target'\n",
        "suites/servers/test_server.py": "import harness.servers\n",
        "harness/__init__.py": "",
        "harness/mem/__init__.py": "",
        "harness/mem/pool.py": "X = 1\n",
        "harness/mem/layout.json": "{}\n",
        "harness/targets/__init__.py": "",
        "harness/targets/fake.py": "class Target: pass\n",
        "harness/servers/__init__.py": "",
        "harness/mutants/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)

    def digest() -> str:
        return suites_digest(("suites/pool",), repo=tmp_path)

    before = digest()
    for unrelated in ("suites/servers/test_server.py", "harness/servers/__init__.py", "harness/mutants/__init__.py"):
        (tmp_path / unrelated).write_text("# edited\n")
        assert digest() == before, unrelated
    (tmp_path / "harness/mem/__pycache__").mkdir()
    (tmp_path / "harness/mem/__pycache__/pool.cpython-311.pyc").write_bytes(b"x")
    assert digest() == before
    for related in (
        "harness/mem/pool.py",  # imported by a test
        "harness/mem/layout.json",  # data beside an imported module
        "suites/pool/helpers.py",  # a relative import
        "harness/targets/fake.py",  # named as a dotted string
        "conftest.py",
        "pyproject.toml",
    ):
        (tmp_path / related).write_text((tmp_path / related).read_text() + "# edited\n")
        after = digest()
        assert after != before, related
        before = after


def test_a_second_matrix_reuses_the_recording_and_a_clean_failure_is_never_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded: list[str] = []

    def counting(target, fault_id, suite, workdir, timeout_s, *, select=None, record=None, settings=(), servers=None):  # noqa: ANN001
        if record is not None:
            recorded.append(suite)
        return stub_run_suite(target, fault_id, suite, workdir, timeout_s, select=select, record=record)

    monkeypatch.setattr(matrix, "run_suite", counting)
    target = dataclasses.replace(matrix.MATRIX_TARGETS["harness"], min_tests=dict.fromkeys(["scenarios"], 1))
    target = dataclasses.replace(target, suites={"scenarios": "suites/scenarios"})
    ids = list(target.catalog())[:5]
    cache = RecordingCache(tmp_path / "rec", dataclasses.replace(FP, target="harness"))
    first = matrix.build_matrix(target, ids, jobs=2, cache=cache)
    assert recorded == ["scenarios"] and not first.recordings[0].reused
    assert first.recordings[0].why.startswith("no recording stored")
    second = matrix.build_matrix(target, ids, jobs=2, cache=cache)
    assert recorded == ["scenarios"] and second.recordings[0].reused  # nothing recorded again
    assert [f.cells for f in second.faults] == [f.cells for f in first.faults] and second.clean == first.clean
    matrix.build_matrix(target, ids, jobs=2, cache=cache, fresh=True)
    assert recorded == ["scenarios", "scenarios"]

    failing = dataclasses.replace(target, min_tests={"scenarios": 99})  # the clean build "fails": too few tests
    other = RecordingCache(tmp_path / "other", dataclasses.replace(FP, target="harness"))
    assert matrix.build_matrix(failing, ids, jobs=2, cache=other).clean["scenarios"].status == "failed"
    assert not (tmp_path / "other" / "clean" / "key.json").exists()
