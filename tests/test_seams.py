"""Fault seams: every declared seam is used by the faults it names, every fault patches only seams
declared for it, every twin still applies and differs from the clean code, and docs/FAULTS.md is the
catalog's current rendering."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import harness
from harness.faults import FAULTS, Fault, Patch, inject
from harness.faults.doc import DOC, render
from harness.seams import Seam, SeamError, declared_seams, seam


# Packages not imported here: the HTTP server needs aiohttp, adapters their own packages, the server kinds launch
# engines (SGLang's stand-ins among them); none declares seams. (The HTTP server's old package name was a prefix of
# the server kinds', so it skipped them too: each is named on its own now.)
UNSEAMED = ("harness.http_server", "harness.servers", "harness.targets.")


def _harness_classes() -> list[type]:
    """Every class defined in harness/ (a file walk: some folders are namespace packages)."""
    root = Path(harness.__file__).parent
    classes = []
    for path in sorted(root.rglob("*.py")):
        name = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        if name.startswith(UNSEAMED) or name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        classes += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__]
    return classes


SEAMS: list[Seam] = declared_seams(_harness_classes())


def test_the_seams_are_exactly_the_places_faults_patch():
    patched = {(p.owner, p.attr) for fault in FAULTS.values() for p in fault.patches}
    assert {(s.owner, s.attr) for s in SEAMS} == patched


@pytest.mark.parametrize("declared", SEAMS, ids=lambda s: s.name)
def test_every_seam_is_patched_by_each_fault_it_names(declared: Seam):
    for fault_id in declared.faults:
        assert fault_id in FAULTS, f"{declared.name} names unknown fault {fault_id}"
        patched = {(p.owner, p.attr) for p in FAULTS[fault_id].patches}
        assert (declared.owner, declared.attr) in patched, f"{fault_id} does not patch its seam {declared.name}"


@pytest.mark.parametrize("fault_id", list(FAULTS))
def test_every_twin_applies_to_the_current_source_and_differs_from_it(fault_id: str):
    fault = FAULTS[fault_id]
    clean = [p.original() for p in fault.patches]
    for patch, original in zip(fault.patches, clean):
        assert patch.replacement is not original and patch.replacement != original, (
            f"{patch.attr}: twin is the clean code"
        )
    with inject(fault):
        for patch in fault.patches:
            assert patch.owner.__dict__[patch.attr] is patch.replacement
    for patch, original in zip(fault.patches, clean):
        assert patch.owner.__dict__[patch.attr] is original, f"{patch.attr} was not restored"


def test_a_patch_outside_a_seam_is_refused():
    class Plain:
        def method(self) -> None: ...

        @seam("another-fault")
        def marked(self) -> None: ...

    with pytest.raises(SeamError, match="not a declared seam"):
        Fault("x", "#0", "", "", "", (Patch(Plain, "method", lambda self: None),))
    with pytest.raises(SeamError, match="not one declared for this fault"):
        Fault("x", "#0", "", "", "", (Patch(Plain, "marked", lambda self: None),))


def test_faults_md_is_the_catalog_rendered():
    assert DOC.read_text() == render(), "docs/FAULTS.md is stale: run `python -m harness.faults.doc`"
