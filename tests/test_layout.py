"""The tree's names, held: each noun of ``harness/`` means one thing.

Two classes of one name in two floors (an ``Engine`` that runs a model and an ``Engine`` that launches a server)
or two modules of one name that mean different things (``identity.py``) are what a newcomer trips on first; the
kinds of server live in ``harness/servers/`` as ``ServerKind``, the engine under test in ``harness/engine/``.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from harness.paths import REPO

HARNESS = REPO / "harness"
# Module names that name a role every floor may have: each one's folder says whose it is.
ROLE_MODULES = {"__init__.py", "__main__.py", "base.py", "cli.py", "errors.py", "runner.py"}
# A fault has one module per target that carries it: the harness's twin and SGLang's source edit of one regression.
FAULT_CATALOGS = ("harness/faults/catalog", "harness/targets/sglang/faults/catalog")


def _modules() -> list[Path]:
    return sorted(p for p in HARNESS.rglob("*.py") if "__pycache__" not in p.parts)


def _classes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef)]


def test_no_two_modules_of_harness_define_a_class_of_the_same_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        for name in _classes(path):
            where[name].append(str(path.relative_to(REPO)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twice, f"classes defined in more than one module: {twice}"


def test_no_two_modules_of_harness_share_a_name_outside_roles_and_fault_catalogs() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        rel = str(path.relative_to(REPO))
        if path.name not in ROLE_MODULES and not rel.startswith(FAULT_CATALOGS):
            where[path.name].append(rel)
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twice, f"module names used twice: {twice}"


def test_the_engine_under_test_and_the_server_kinds_keep_their_names() -> None:
    assert "Engine" in _classes(HARNESS / "engine" / "engine.py")
    assert "ServerKind" in _classes(HARNESS / "servers" / "base.py")
    assert not (HARNESS / "engines").exists() and not (HARNESS / "identity.py").exists()
