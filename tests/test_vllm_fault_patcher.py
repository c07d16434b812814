"""The harness's own source patcher for vLLM-side faults (``harness/targets/vllm/faults``), on plain Python: it edits
methods, class and static methods, decorated functions, closures, ``super()`` and private names; refuses a match that
is missing, ambiguous or would change a closure; applies all of a fault or none; restores what it swapped. And the
vLLM catalog's shape (no vLLM needed: the records are data)."""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest

from harness.env import VLLM_FAULT_ENV
from harness.kill_record import spec_of
from harness.targets.sglang.faults import SGLangFault
from harness.targets.vllm.faults import SourceEdit, SourcePatchError, VLLMFault, activate_from_env, inject, resolve
from harness.targets.vllm.faults.by_id import KILLED_BY, VLLM_FAULTS, vllm_fault_code

FIXTURE = """
import functools


class Base:
    def total(self, x):
        return x


class Pool(Base):
    scale = 2

    def total(self, x):
        value = super().total(x)
        if value > 0:
            value = value * self.scale
        return value + self.__bonus()

    def __bonus(self):
        return 0

    def banner(self, width):
        text = '''first
second'''
        width = width
        return text, width

    @classmethod
    def blocks(cls, n):
        return n // cls.scale

    @staticmethod
    def twice(n):
        n = n + n
        return n


def make_adder(k):
    def add(x):
        return x + k
    return add


add3 = make_adder(3)


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper


@logged
def clamp(x):
    x = max(x, 0)
    return x


def bump_twice(x):
    x = x + 1
    x = x + 1
    return x
"""


@pytest.fixture
def mod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "patcher_fixture.py").write_text(FIXTURE)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("patcher_fixture", None)
    yield importlib.import_module("patcher_fixture")
    sys.modules.pop("patcher_fixture", None)


def _fault(*edits: SourceEdit) -> VLLMFault:
    return VLLMFault("test", "#0", "", "", "", edits)


def test_a_method_edit_keeps_super_private_names_and_relative_indentation(mod):
    edit = SourceEdit(
        "patcher_fixture.Pool.total",
        "if value > 0:\n    value = value * self.scale",
        """
        if value > 0:
            value = value * self.scale
            if value > 4:
                value = -value
        """,
    )
    pool = mod.Pool()
    assert pool.total(3) == 6
    with inject(_fault(edit)):
        assert pool.total(3) == -6 and pool.total(2) == 4  # super() and self.__bonus still resolve
    assert pool.total(3) == 6


def test_class_static_decorated_and_closure_functions_are_edited_in_place(mod):
    edits = (
        SourceEdit("patcher_fixture.Pool.blocks", "return n // cls.scale", "return n // cls.scale + 1"),
        SourceEdit("patcher_fixture.Pool.twice", "n = n + n", "n = n + n + n"),
        SourceEdit("patcher_fixture.clamp", "x = max(x, 0)", "x = max(x, 1)"),
        SourceEdit("patcher_fixture.add3", "return x + k", "return x + k * 10"),
    )
    assert resolve("patcher_fixture.clamp") is mod.clamp.__wrapped__
    with inject(_fault(*edits)):
        assert (mod.Pool.blocks(8), mod.Pool.twice(2), mod.clamp(-5), mod.add3(1)) == (5, 6, 1, 31)
    assert (mod.Pool.blocks(8), mod.Pool.twice(2), mod.clamp(-5), mod.add3(1)) == (4, 4, 0, 4)


def test_multi_line_strings_keep_their_text(mod):
    with inject(_fault(SourceEdit("patcher_fixture.Pool.banner", "width = width", "width = width * 2"))):
        assert mod.Pool().banner(3) == ("first\nsecond", 6)


def test_tracebacks_and_call_traces_see_the_installed_names_and_lines(mod):
    edits = (
        SourceEdit("patcher_fixture.clamp", "x = max(x, 0)", "x = max(x, 0) // 0"),
        SourceEdit("patcher_fixture.Pool.total", "return value + self.__bonus()", "return value"),
        SourceEdit("patcher_fixture.add3", "return x + k", "return x + k + 0"),
    )
    with inject(_fault(*edits)):
        clamp, total, add = mod.clamp.__wrapped__.__code__, mod.Pool.total.__code__, mod.add3.__code__
        assert (clamp.co_qualname, total.co_qualname, add.co_qualname) == (
            "clamp",
            "Pool.total",
            "make_adder.<locals>.add",
        )
        assert clamp.co_filename == mod.__file__
        assert clamp.co_firstlineno == FIXTURE.splitlines().index("def clamp(x):") + 1
        assert total.co_firstlineno == FIXTURE.splitlines().index("    def total(self, x):", 6) + 1


@pytest.mark.parametrize(
    "edit, problem",
    [
        (SourceEdit("patcher_fixture.Pool.twice", "n = n * n", "pass"), "is not in the installed source"),
        (SourceEdit("patcher_fixture.Pool.twice", "n", "pass"), "is not in the installed source"),  # whole lines only
        (
            SourceEdit("patcher_fixture.bump_twice", "x = x + 1", "x = x + 2"),
            r"occurs 2 times \(lines \[2, 3\] from the def\)",
        ),
        (SourceEdit("patcher_fixture.add3", "return x + k", "return x"), "closes over"),
        (SourceEdit("patcher_fixture.Pool.nothing", "x", "y"), "has no attribute 'nothing'"),
    ],
)
def test_an_edit_that_cannot_apply_as_written_is_refused(mod, edit, problem):
    with pytest.raises(SourcePatchError, match=problem):
        with inject(_fault(edit)):
            pass


def test_a_fault_applies_all_of_its_edits_or_none(mod):
    good = SourceEdit("patcher_fixture.clamp", "x = max(x, 0)", "x = 7")
    bad = SourceEdit("patcher_fixture.Pool.twice", "not there", "pass")
    clean = mod.clamp.__wrapped__.__code__
    with pytest.raises(SourcePatchError):
        with inject(_fault(good, bad)):
            pass
    assert mod.clamp.__wrapped__.__code__ is clean and mod.clamp(-1) == 0


def test_the_environment_names_one_fault_or_none():
    assert activate_from_env({}) is None and activate_from_env({VLLM_FAULT_ENV: " "}) is None
    with pytest.raises(ValueError, match="unknown vLLM fault 'no-such-fault'; known: vllm-"):
        activate_from_env({VLLM_FAULT_ENV: "no-such-fault"})


def test_the_catalog_names_each_fault_once_with_its_code_and_its_killer():
    assert len(VLLM_FAULTS) >= 6 and all(fid.startswith("vllm-") for fid in VLLM_FAULTS)
    assert set(KILLED_BY) == set(VLLM_FAULTS), "every fault names the suite test that kills it"
    assert all(node.startswith("suites/vllm/test_") and "::test_" in node for node, _ in KILLED_BY.values())
    code = vllm_fault_code()
    for fid, fault in VLLM_FAULTS.items():
        assert code[fid] == tuple(sorted({e.target for e in fault.edits})) and all(
            t.startswith("vllm.") for t in code[fid]
        ), f"{fid}: {code[fid]}"
        assert fault.seed.startswith("#") and fault.breaks and fault.user_sees and fault.invariant, fid
        assert textwrap.dedent(fault.edits[0].match).strip(), f"{fid}: an edit with an empty match"
    sglang_shape = spec_of(SGLangFault("x", "#0", "", "", "", ())).to_json().keys()  # the kill matrix's record
    assert all(spec_of(f).to_json().keys() == sglang_shape for f in VLLM_FAULTS.values())
