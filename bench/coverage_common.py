"""What the coverage measures of SGLang's and vLLM's memory code share: the lines a set of coverage data files ran
per file, a function's span, and missing lines named as ranges by function (``bench/sglang_coverage.py``,
``bench/vllm_coverage.py``)."""

from __future__ import annotations

import ast
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Span:
    """A function's lines: its whole body (after the docstring) and its whole definition."""

    body: tuple[int, int]
    whole: tuple[int, int]


def spans(path: Path) -> dict[str, Span]:
    """Every function and method of ``path`` by qualified name (nested ones as ``outer.inner``, a property's setter
    as ``Class.name.setter``); ``<module>`` is the file."""
    tree = ast.parse(path.read_text())
    found = {"<module>": Span((1, len(path.read_text().splitlines())), (1, len(path.read_text().splitlines())))}

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{owner}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(_named(d, "overload") for d in child.decorator_list):
                    continue  # a typing stub: the name's span is its implementation's, defined after it
                body = child.body[1:] if ast.get_docstring(child) and len(child.body) > 1 else child.body
                setter = any(isinstance(d, ast.Attribute) and d.attr == "setter" for d in child.decorator_list)
                name = f"{owner}{child.name}" + (".setter" if setter else "")
                found.setdefault(name, Span((body[0].lineno, child.end_lineno), (child.lineno, child.end_lineno)))
                visit(child, f"{name}.")

    visit(tree, "")
    return found


def _named(decorator: ast.expr, name: str) -> bool:
    """Whether ``decorator`` is ``name`` or ``something.name``."""
    return (isinstance(decorator, ast.Name) and decorator.id == name) or (
        isinstance(decorator, ast.Attribute) and decorator.attr == name
    )


def body_lines(path: Path) -> set[int]:
    """The lines inside the bodies of ``path``'s functions: importing a module runs its ``def`` and class lines, never
    these, so they are the lines that say code was called."""
    return {
        n for name, span in spans(path).items() if name != "<module>" for n in range(span.body[0], span.body[1] + 1)
    }


def uncovered_ranges(path: Path, lines: Iterable[int]) -> list[str]:
    """``lines`` as ``function: a-b, c`` strings, one per innermost function (``<module>`` outside any)."""
    found_spans = spans(path)
    by_function: dict[str, list[int]] = {}
    for line in sorted(lines):
        inside = [
            (span.whole[1] - span.whole[0], name)
            for name, span in found_spans.items()
            if name != "<module>" and span.whole[0] <= line <= span.whole[1]
        ]
        by_function.setdefault(min(inside)[1] if inside else "<module>", []).append(line)
    out = []
    for name, found in by_function.items():
        runs: list[list[int]] = []
        for line in found:
            if runs and line == runs[-1][1] + 1:
                runs[-1][1] = line
            else:
                runs.append([line, line])
        out.append(f"{name}: " + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs))
    return out


def lines_ran(data_files: Iterable[Path], package: str, names: Sequence[str]) -> dict[str, set[int]]:
    """The lines of each of ``names`` (paths inside ``package``, e.g. ``sglang/srt``) that any of ``data_files``
    recorded. Each file is read from a copy: coverage gives a data file it finds without its tables a schema of its
    own, so reading one a traced process is still writing could break that process's save."""
    from coverage import CoverageData

    ran: dict[str, set[int]] = {name: set() for name in names}
    with tempfile.TemporaryDirectory() as snapshots:
        for i, data_file in enumerate(sorted(data_files)):
            copy = Path(snapshots) / f"{i}-{data_file.name}"
            shutil.copyfile(data_file, copy)
            data = CoverageData(basename=str(copy))
            data.read()
            for measured in data.measured_files():
                for name in names:
                    if measured.endswith(f"{package}/{name}"):
                        ran[name].update(data.lines(measured) or ())
    return ran


def statements_ran(path: Path, lines: Iterable[int]) -> set[int]:
    """The statements of ``path`` (as coverage's report counts them: excluded lines left out) that ``lines``, line
    numbers as a data file records them, ran. A data file holds every line the tracer saw, continuation lines of a
    statement and decorator lines among them, and which of those it sees depends on what the statement evaluated (a
    conditional expression's branch, an argument on a line of its own), so two runs of one statement can record
    different lines; each is mapped to its statement's first line, as coverage's report does."""
    from coverage import Coverage
    from coverage.python import PythonFileReporter

    reporter = PythonFileReporter(str(path), coverage=Coverage(config_file=False))
    return set(reporter.translate_lines(lines)) & set(reporter.lines())


def statement_lines(path: Path) -> set[int]:
    """Every statement of ``path`` as coverage's report counts them."""
    from coverage import Coverage
    from coverage.python import PythonFileReporter

    return set(PythonFileReporter(str(path), coverage=Coverage(config_file=False)).lines())


def pct(a: int, b: int) -> str:
    """``a`` of ``b`` as a percentage with both counts; a dash where there is nothing to count."""
    return f"{100 * a / b:.1f} % ({a}/{b})" if b else "—"
