"""The mutants: cosmic-ray's operators over the installed engine's source text, one change each.

Why cosmic-ray (8.7): its operators are a library over parso trees (``mutate_code(source, operator, occurrence)``),
blind to where the module lives, so it mutates an installed package's files as they are; mutmut (3.x) instead
rewrites the project's own source tree into ``mutants/`` with trampolines and runs its own pytest there, and cannot
be pointed at ``site-packages``. cosmic-ray's own runner writes each mutant onto the file on disk, which would change
the shared venv under every parallel run, so the harness takes the mutants from it and runs them itself
(``harness.mutants.activate`` imports the mutated text in one test process only).

The operators are a subset, the sibling of each operator rather than every other one (``<`` to ``<=``, not to
``is``; ``+`` to ``-``, not to ``**``), as mutmut chooses: the cross product cosmic-ray can make multiplies the
mutants eleven-fold at each arithmetic site, mostly with mutants any test kills at once or none can tell apart.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import random
from dataclasses import dataclass, replace

from harness.mutants.scope import SCOPES, MutantTarget, ScopeFile

# Sibling replacements (cosmic-ray's operator names, less the ``core/`` prefix), each a bug class of index code.
OPERATORS: tuple[str, ...] = (
    "ReplaceBinaryOperator_Add_Sub",
    "ReplaceBinaryOperator_Sub_Add",
    "ReplaceBinaryOperator_Mul_Add",
    "ReplaceBinaryOperator_FloorDiv_Mul",
    "ReplaceBinaryOperator_Div_Mul",
    "ReplaceBinaryOperator_Mod_FloorDiv",
    "ReplaceBinaryOperator_BitAnd_BitOr",
    "ReplaceBinaryOperator_BitOr_BitAnd",
    "ReplaceBinaryOperator_LShift_RShift",
    "ReplaceBinaryOperator_RShift_LShift",
    "ReplaceComparisonOperator_Lt_LtE",
    "ReplaceComparisonOperator_LtE_Lt",
    "ReplaceComparisonOperator_Gt_GtE",
    "ReplaceComparisonOperator_GtE_Gt",
    "ReplaceComparisonOperator_Eq_NotEq",
    "ReplaceComparisonOperator_NotEq_Eq",
    "ReplaceComparisonOperator_Is_IsNot",
    "ReplaceComparisonOperator_IsNot_Is",
    "ReplaceUnaryOperator_USub_UAdd",
    "AddNot",
    "ReplaceTrueWithFalse",
    "ReplaceFalseWithTrue",
    "ReplaceAndWithOr",
    "ReplaceOrWithAnd",
    "ReplaceBreakWithContinue",
    "ReplaceContinueWithBreak",
    "NumberReplacer",
    "ZeroIterationForLoop",
)


@dataclass(frozen=True)
class Mutant:
    """One change: where (module, line), by which operator and occurrence, in which function (the frame's
    ``module.qualname`` test impact records), and the changed line before and after."""

    id: str  # <module>:<line>:<operator>:<occurrence>, stable for one source text and cosmic-ray release
    module: str
    line: int
    operator: str
    occurrence: int  # the operator's n-th position in the file (cosmic-ray's own counting)
    function: str  # module.qualname of the innermost def or class around the line; module.<module> outside all
    before: str
    after: str

    @property
    def order(self) -> tuple[str, int, str, int]:
        """Where a report lists it: by file, line, operator and occurrence (every run and merge alike)."""
        return (self.module, self.line, self.operator, self.occurrence)

    @property
    def short_module(self) -> str:
        return self.module.rsplit(".", 2)[-1] if "." in self.module else self.module

    def diff(self) -> str:
        return f"-{self.before.strip()}\n+{self.after.strip()}"


def _operator(name: str):
    from cosmic_ray.plugins import get_operator

    return get_operator(f"core/{name}")()


def _scopes(tree: ast.Module) -> list[tuple[int, int, str]]:
    """Every def and class as (first line, last line, qualname as CPython spells it: ``f.<locals>.g``)."""
    out: list[tuple[int, int, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                out.append((child.lineno, child.end_lineno or child.lineno, name))
                inner = f"{name}.<locals>." if not isinstance(child, ast.ClassDef) else f"{name}."
                walk(child, inner)
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


Span = tuple[tuple[int, int], tuple[int, int]]  # (line, col) from, to


def _unmutated(tree: ast.Module) -> list[Span]:
    """Where no mutant goes: type annotations (text, or at most a check a type checker makes: no behaviour) and the
    arguments of log calls (``logger.debug(...)``, ``logging.warning(...)``: only a message changes)."""
    spans: list[Span] = []

    def add(node: ast.AST | None) -> None:
        if node is not None and hasattr(node, "end_lineno"):
            spans.append(((node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset)))

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            add(node.returns)
            for arg in [
                *node.args.posonlyargs,
                *node.args.args,
                *node.args.kwonlyargs,
                node.args.vararg,
                node.args.kwarg,
            ]:
                add(getattr(arg, "annotation", None))
        elif isinstance(node, ast.AnnAssign):
            add(node.annotation)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id in ("logger", "logging", "log"):
                add(node)
    return spans


def _inside(spans: list[Span], pos: tuple[int, int]) -> bool:
    return any(start <= pos < end for start, end in spans)


def enclosing(scopes: list[tuple[int, int, str]], line: int) -> str:
    """The innermost def or class whose body holds ``line`` (decorators run in the scope around it); else
    ``<module>``."""
    best: tuple[int, str] | None = None
    for first, last, name in scopes:
        if first <= line <= last and (best is None or first >= best[0]):
            best = (first, name)
    return best[1] if best else "<module>"


def statement_lines(tree: ast.Module, line: int) -> range:
    """The lines whose execution runs the statement a mutant on ``line`` is in: a simple statement's every line, a
    compound one's header only (``if``/``for``/``while``/``with`` up to its body); ``line`` alone outside any (a
    decorator). Test impact credits executed lines; a test that ran none of these never ran the mutant."""
    best: ast.stmt | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno):
            if best is None or (node.lineno, -(node.end_lineno or 0)) >= (best.lineno, -(best.end_lineno or 0)):
                best = node
    if best is None:
        return range(line, line + 1)
    body = getattr(best, "body", None)
    last = (body[0].lineno - 1) if body and isinstance(body, list) else (best.end_lineno or best.lineno)
    if not best.lineno <= line <= last:  # e.g. a decorator above a def: not in the header
        return range(line, line + 1)
    return range(best.lineno, last + 1)


def mutated_source(source: str, operator: str, occurrence: int) -> str:
    from cosmic_ray.mutating import mutate_code

    mutated = mutate_code(source, _operator(operator), occurrence)
    if mutated is None:
        raise LookupError(f"{operator} has no occurrence {occurrence} in this source")
    return mutated


def mutants_of(scope: ScopeFile, source: str | None = None) -> list[Mutant]:
    """Every mutant of one file (its installed text, or ``source``), in its scope's functions only. The changed
    line after the mutation is left empty here (making each mutant's text parses the file again):
    ``with_after`` fills it for the mutants a run takes."""
    from cosmic_ray.ast import ast_nodes, get_ast

    text = scope.path().read_text() if source is None else source
    tree = ast.parse(text)
    scopes, skipped = _scopes(tree), _unmutated(tree)
    lines = text.splitlines()
    nodes = list(ast_nodes(get_ast(text)))
    out: list[Mutant] = []
    for name in OPERATORS:
        op = _operator(name)
        positions = [pos for node in nodes for pos in op.mutation_positions(node)]
        for occurrence, ((line, col), _end) in enumerate(positions):
            qualname = enclosing(scopes, line)
            if scope.holds(qualname) and not _inside(skipped, (line, col)):
                out.append(
                    Mutant(
                        id=f"{scope.module}:{line}:{name}:{occurrence}",
                        module=scope.module,
                        line=line,
                        operator=name,
                        occurrence=occurrence,
                        function=f"{scope.module}.{qualname}",
                        before=lines[line - 1],
                        after="",
                    )
                )
    return out


def with_after(mutant: Mutant, text: str) -> Mutant:
    """``mutant`` with its changed line after the change (a change of several lines: their unified diff)."""
    lines = text.splitlines()
    mutated = mutated_source(text, mutant.operator, mutant.occurrence).splitlines()
    changed = [i for i, (a, b) in enumerate(zip(lines, mutated)) if a != b]
    if len(mutated) == len(lines) and len(changed) == 1:
        return replace(mutant, before=lines[changed[0]], after=mutated[changed[0]])
    diff = "\n".join(difflib.unified_diff(lines, mutated, lineterm="", n=0))
    return replace(mutant, after=diff)


def source_digest(scopes: tuple[ScopeFile, ...]) -> str:
    """One digest of every mutated file's text: mutant ids are meaningful only against it."""
    h = hashlib.sha256()
    for scope in scopes:
        h.update(scope.module.encode() + b"\0" + scope.path().read_bytes())
    return h.hexdigest()[:16]


def population(target: MutantTarget) -> list[Mutant]:
    return [m for scope in SCOPES[target] for m in mutants_of(scope)]


def draw(mutants: list[Mutant], sample: int, seed: int) -> list[Mutant]:
    """A seeded sample, the same on every machine for one source text (0 or more than there are: all)."""
    ordered = sorted(mutants, key=lambda m: m.id)
    if sample <= 0 or sample >= len(ordered):
        return ordered
    return sorted(random.Random(seed).sample(ordered, sample), key=lambda m: m.order)
