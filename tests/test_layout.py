"""The tree's names and floors, held: each noun of ``harness/`` means one thing, and imports run down.

Two classes of one name in two floors (an ``Engine`` that runs a model and an ``Engine`` that launches a server)
or two modules of one name that mean different things (``identity.py``) are what a newcomer trips on first; the
kinds of server live in ``harness/servers/`` as ``ServerKind``, the engine under test in ``harness/engine/``, the
harness's own HTTP server (what ``swa-harness serve`` runs) in ``harness/http_server/``.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from harness.paths import REPO

HARNESS = REPO / "harness"
# Module names that name a role every floor may have: each one's folder says whose it is.
ROLE_MODULES = {"__init__.py", "__main__.py", "base.py", "cli.py", "errors.py", "runner.py"}
# A fault has one module per target that carries it: the harness's twin and SGLang's or vLLM's source edit of one
# regression.
# Each engine target has the same three parts (harness/targets/<engine>/: its releases' overlays, what a release has,
# the adapters chosen by it), over the shared targets/releases.py.
TARGET_PARTS = ("releases.py", "adapters.py", "capabilities.py")
FAULT_CATALOGS = (
    "harness/faults/catalog",
    "harness/targets/sglang/faults/catalog",
    "harness/targets/vllm/faults/catalog",
)
# Each of those three fault packages has the same parts: ``base.py`` (the record and how it is applied), ``catalog/``,
# and ``by_id.py`` (the catalog by id, ``get_fault``).
FAULT_PARTS = ("by_id.py",)
# Packages that stand in for another project's modules (absent on CPU), whose code must sit at that project's import
# paths, ``__init__.py`` included.
STAND_INS = ("harness/servers/sglang_server/shims", "harness/targets/sglang/import_shims")


# The floors of harness/, lowest first: a package imports only from floors below its own (at run time too: imports
# inside functions count). What serves a job (servers, http_server, jobs) sits above the engine it serves; data that
# crosses the floors (evals' results) sits low so that every floor can hold it; the build's identity sits with the keys
# made of it (reuse), under everything that serves or records a build.
FLOORS: tuple[frozenset[str], ...] = (
    frozenset(
        {"paths", "env", "seams", "op_args", "model", "shards", "cell_progress"}
    ),  # shards, cell_progress: any matrix
    frozenset({"mem", "opcount", "evals", "kill_record"}),  # kill_record: the kill matrix's record
    frozenset({"mutants"}),  # a mutation run's mutants and record (its runner is a job), read by the report
    frozenset({"graph", "report", "reuse"}),  # reuse: the build's identity, the resume key, the tokenizer memo
    frozenset({"engine"}),
    frozenset({"targets"}),
    frozenset({"faults", "servers", "findings"}),  # findings: the engines' bugs we follow, release by release
    frozenset({"http_server", "jobs"}),  # http_server: the harness's own OpenAI-compatible server
    frozenset({"cli"}),
)
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}


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
            if path.name in TARGET_PARTS and path.parent.parent.name == "targets":
                continue
            if path.name in FAULT_PARTS and path.parent.name == "faults":
                continue
            where[path.name].append(rel)
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not twice, f"module names used twice: {twice}"


def _harness_imports(path: Path) -> set[str]:
    """The top-level ``harness`` packages (or modules) that ``path`` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        found |= {name.split(".")[1] for name in names if name.startswith("harness.")}
    return found


def test_every_package_of_harness_has_a_floor_and_imports_only_from_floors_below() -> None:
    upward = []
    for path in _modules():
        rel = path.relative_to(HARNESS)
        own = rel.parts[0].removesuffix(".py")
        if own == "__init__":
            continue
        assert own in FLOOR, f"harness/{rel.parts[0]} has no floor in FLOORS"
        upward += [
            f"harness/{rel} imports harness.{name}"
            for name in _harness_imports(path) - {own}
            if FLOOR.get(name, len(FLOORS)) >= FLOOR[own]
        ]
    assert not upward, "imports that run up or across a floor: " + "; ".join(upward)


# Packages whose modules may import one another in a circle: a fault registry's ``__init__`` loads its catalog (on first
# use), and each catalog module takes the registry's types from that ``__init__``. Any other circle of modules, or one
# that leaves a registry, is a module that should be split or a record in the wrong room (issue 55).
REGISTRIES = ("harness.faults", "harness.targets.sglang.faults", "harness.targets.vllm.faults")


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _module_imports(path: Path, known: set[str]) -> set[str]:
    """The harness modules ``path`` imports, anywhere in it but under ``if TYPE_CHECKING:`` (never run): ``from pkg
    import name`` is the module ``pkg.name`` where there is one, else ``pkg`` itself."""
    tree = ast.parse(path.read_text(), filename=str(path))
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for child in node.body
        for n in ast.walk(child)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness"):
            found |= {
                f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in known else node.module for a in node.names
            }
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found & known


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return circles


def test_no_modules_of_harness_import_one_another_in_a_circle_outside_the_fault_registries() -> None:
    paths = {_module_name(p): p for p in _modules()}
    graph = {name: _module_imports(path, set(paths)) - {name} for name, path in paths.items()}
    circles = _circles(graph)
    outside = [c for c in circles if not any(all(m.startswith(r) for m in c) for r in REGISTRIES)]
    assert not outside, "modules that import one another in a circle: " + "; ".join(" <-> ".join(c) for c in outside)
    # the check sees circles: each registry is one (its __init__, its base, its catalog)
    assert len(circles) == len(REGISTRIES), circles


def test_the_circle_check_finds_a_circle_of_two_modules() -> None:
    assert _circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def _holds_code(node: ast.stmt) -> bool:
    """Whether a top-level statement of a package's ``__init__`` does more than re-export: its docstring, imports,
    ``__all__`` and a module ``__getattr__`` that loads a name on first use are re-exports."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return False
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
        return False
    if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == ["__all__"]:
        return False
    return not (isinstance(node, ast.FunctionDef) and node.name == "__getattr__")


def test_package_init_files_only_re_export() -> None:
    """A reader opens a package's modules, not its ``__init__``, to find its code (issue 55)."""
    held = [
        f"{path.relative_to(REPO)}:{node.lineno}"
        for path in _modules()
        if path.name == "__init__.py" and not str(path.relative_to(REPO)).startswith(STAND_INS)
        for node in ast.parse(path.read_text(), filename=str(path)).body
        if _holds_code(node)
    ]
    assert not held, "code in package __init__ files (move it into a module and re-export it): " + ", ".join(held)


def test_the_engine_under_test_and_the_server_kinds_keep_their_names() -> None:
    assert "Engine" in _classes(HARNESS / "engine" / "engine.py")
    assert "ServerKind" in _classes(HARNESS / "servers" / "base.py")
    assert not (HARNESS / "engines").exists() and not (HARNESS / "identity.py").exists()
    # harness/server/ beside harness/servers/ read as one thing: the HTTP server is harness/http_server/ (issue 55).
    assert (HARNESS / "http_server" / "__main__.py").is_file() and not list((HARNESS / "server").glob("*.py"))


# The rooms of the jobs: one job each (a plan's model, its file, its text; the runner, which checks a plan before it
# starts it; an arm's session; judging; recording, provenance included; the summary), none so large that a reader has
# to page through several jobs.
JOBS_MAX_LINES = 500
# Where a harness class whose constructor takes more than three arguments is called with keywords past its first (a
# name, an id, a status): a reader sees which value is which, and a field added or moved cannot shift the values into
# the wrong fields unseen. A module's private classes too (the tape's ``_Step``, the worker's ``_Job``).
KEYWORD_CALLS = ("harness", "bench", "suites")


def test_no_module_of_jobs_is_over_500_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in (HARNESS / "jobs").glob("*.py")
        if (n := len(p.read_text().splitlines())) > JOBS_MAX_LINES
    }
    assert not long, f"harness/jobs modules over {JOBS_MAX_LINES} lines: {long}"


def _constructor_arguments() -> dict[str, list[str]]:
    """Each harness class's constructor arguments: its ``__init__``'s, else its fields in order."""
    out = {}
    for path in _modules():
        for node in ast.parse(path.read_text(), filename=str(path)).body:
            if isinstance(node, ast.ClassDef):
                init = next((b for b in node.body if isinstance(b, ast.FunctionDef) and b.name == "__init__"), None)
                fields = [
                    b.target.id for b in node.body if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name)
                ]
                out[node.name] = [a.arg for a in init.args.args[1:]] if init else fields
    return out


def _harness_bindings(tree: ast.Module, path: Path) -> tuple[dict[str, str], set[str]]:
    """The names ``path`` binds to harness classes (bound name -> class name) and those it binds to harness modules.

    A harness module's own classes, and whatever any module imports from ``harness`` (at its top or inside a
    function): a class of bench's or a suite's own, or one of torch's or the standard library's, that merely shares a
    harness class's name (bench's ``Row`` and ``Cell``, a suite's stand-in ``Req``, ``torch.nn.RMSNorm``) is not one.
    """
    classes = {node.name: node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    classes = classes if HARNESS in path.parents else {}
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "harness":
            for alias in node.names:
                parts = REPO.joinpath(*f"{node.module}.{alias.name}".split("."))
                if parts.with_suffix(".py").is_file() or (parts / "__init__.py").is_file():
                    modules.add(alias.asname or alias.name)
                else:
                    classes[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name.split(".")[0] == "harness"}
    return classes, modules


def test_constructors_of_more_than_three_arguments_are_called_with_keywords() -> None:
    # By class name: no two modules of harness define a class of one name (held above).
    arguments = _constructor_arguments()
    positional = []
    for place in KEYWORD_CALLS:
        paths = [REPO / place] if place.endswith(".py") else sorted((REPO / place).rglob("*.py"))
        for path in paths:
            tree = ast.parse(path.read_text(), filename=str(path))
            classes, modules = _harness_bindings(tree, path)
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or len(node.args) <= 1:
                    continue
                func = node.func
                if isinstance(func, ast.Name):
                    name = classes.get(func.id, "")
                elif isinstance(func, ast.Attribute) and ast.unparse(func.value) in modules:
                    name = func.attr
                else:
                    continue
                if name.lstrip("_")[:1].isupper() and len(arguments.get(name, ())) > 3:
                    positional.append(f"{path.relative_to(REPO)}:{node.lineno} {name}({len(node.args)} positional)")
    assert not positional, "call these with keywords: " + "; ".join(positional)


# Module-level names (constants, type aliases) that several modules define on purpose: the same part of each
# engine's, target's or server kind's module, one meaning each time.
PARALLEL_NAMES = {
    "API_MOVES": "each engine's release matrix (harness/jobs/<engine>_matrix.py)",
    "DEFAULT_RANGE": "each engine's release matrix",
    "MATRIX_JSON": "each engine's release matrix",
    "SPEC": "each engine's release matrix",
    "SUITES": "each engine's release matrix",
    "PACKAGE": "each target's releases.py",
    "ROOT": "each target's releases.py",
    "CPU_FLAGS": "each server kind",
    "GRAPHS_OFF_FLAGS": "each server kind",
    "STATS": "each server kind",
    "FAULT": "each fault catalog module's one fault",
    "SEEDS_NOT_PORTED": "each target's fault catalog",
    "GRAPH_MODES": "harness/graph's, and the harness server's own without importing torch",
}


def _module_names(path: Path) -> set[str]:
    """The public module-level names ``path`` assigns that name a thing: constants and type aliases."""
    names = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            names.add(node.target.id)
        elif isinstance(node, getattr(ast, "TypeAlias", ())):  # `type X = ...` (Python 3.12)
            names.add(node.name.id)
    return {name for name in names if name[:1].isupper()}


def test_type_aliases_and_module_level_names_have_one_meaning_each() -> None:
    """``Engine`` as a Literal of two engines beside the ``Engine`` class, ``NO_VERDICT`` as a prefix in one module
    and a tuple of pytest messages in another: one name, two things. A module-level name is defined once (its users
    import it), or is one of PARALLEL_NAMES."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        for name in _module_names(path):
            where[name].append(str(path.relative_to(REPO)))
    classes = {name for path in _modules() for name in _classes(path)}
    twice = {n: p for n, p in where.items() if (len(p) > 1 or n in classes) and n not in PARALLEL_NAMES}
    assert not twice, f"module-level names defined in more than one module of harness (or beside a class): {twice}"


# Where the README names what a job writes, not what the tree holds.
README_OUTPUTS = ("reports/latest/",)


def test_every_path_the_readme_names_exists() -> None:
    """A path in backticks (``harness/jobs/runner.py``, ``suites/prefix/``; ``file.py:function`` names the file) must
    be in the tree: a module moved or renamed takes its README line along."""
    named = set()
    for token in re.findall(r"`([^`\s]+)`", (REPO / "README.md").read_text()):
        path = token.split(":")[0]
        if re.match(r"(harness|suites|bench|docs|tests|reports|fixtures|\.ci|\.github)/", path) and not any(
            c in path for c in "*<{"
        ):
            named.add(path)
    missing = sorted(p for p in named if not (REPO / p).exists() and not p.startswith(README_OUTPUTS))
    assert named and not missing, f"the README names paths that do not exist: {missing}"
