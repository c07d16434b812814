"""``swa-harness merge``: the shards of a matrix (``--shard K/N``) back into the report one machine writes.

    swa-harness merge shard-1.json shard-2.json shard-3.json shard-4.json --out reports/kill-matrix-sglang.json

A kill matrix (``swa-harness faults``), a release matrix (``sglang-matrix``, ``vllm-matrix``) or a mutation run
(``swa-harness mutants``: ``harness.mutants.record.merge``), told apart by its JSON. Refused, naming the field and the two files: shards of another target or engine, checkout (``commit``), mode,
suites, selection or shard count; a shard missing or given twice; a cell held by a shard the hash does not give it
(``harness/shards.py``). Every shard ran the clean build: its cells must be equal in every shard, or the merge is
refused naming the suite (a clean build that differs between machines is no one matrix).

The merged kill matrix has the fault rows in the order of the whole selection (the catalog's), the clean cells,
each settings' clean build (each shard ran those of its own faults: the union, equal where shared) and, for time,
``wall_s`` and ``clean_and_recording_s`` the *largest* of the shards' (they run at once: the time to the merged
report, not the machine time, which is their sum); ``jobs`` the largest. A release matrix's rows follow the release
order; its ``command`` is the first shard's without ``--shard`` (the shards' may differ only in ``--shard``,
``--out`` and ``--markdown``). Merged, a matrix is whole: no shard, no selection.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness.kill_record import CleanCell, FaultRow, KillMatrix, save
from harness.mutants.record import MutationRun
from harness.mutants.record import save as save_mutation_run
from harness.shards import WHOLE, Shard
from harness.targets.releases import release_order


class MergeError(ValueError):
    """Shards that are not parts of one matrix: the message names the field and the files."""


def _shard_of(text: str | None, name: str) -> Shard:
    if text is None:
        return WHOLE
    try:
        return Shard.parse(text)
    except ValueError as error:
        raise MergeError(f"{name}: field shard: {error}") from None


def _same(field: str, values: Mapping[str, Any]) -> Any:
    """The one value every shard has for ``field``; else a MergeError naming the field and the first two that differ."""
    items = list(values.items())
    first_name, first = items[0]
    for name, value in items[1:]:
        if value != first:
            raise MergeError(f"field {field} differs: {first_name} has {first!r}, {name} has {value!r}")
    return first


def _check_shards(shards: Mapping[str, Shard], cells: Mapping[str, Sequence[str]]) -> None:
    """Every shard of one count exactly once, each holding only cells the hash gives it."""
    count = _same("shard count", {name: s.count for name, s in shards.items()})
    seen: dict[int, str] = {}
    for name, shard in shards.items():
        if shard.index in seen:
            raise MergeError(f"field shard: {seen[shard.index]} and {name} are both shard {shard}")
        seen[shard.index] = name
        stray = [c for c in cells[name] if not shard.holds(c)]
        if stray:
            raise MergeError(f"{name}: shard {shard} holds {stray}, which the hash gives to other shards")
    missing = [f"{i}/{count}" for i in range(1, count + 1) if i not in seen]
    if missing:
        raise MergeError(f"field shard: shards {', '.join(missing)} missing (given {len(shards)} of {count})")


def _same_cells(what: str, cells: Mapping[str, Mapping[str, CleanCell]]) -> dict[str, CleanCell]:
    """The clean cells every shard ran, equal suite by suite; a suite that differs is named."""
    merged: dict[str, CleanCell] = {}
    owner: dict[str, str] = {}
    for name, suites in cells.items():
        for suite, cell in suites.items():
            if suite in merged and merged[suite] != cell:
                raise MergeError(
                    f"{what}: suite {suite} differs between shards: {owner[suite]} has {merged[suite]}, "
                    f"{name} has {cell}"
                )
            merged.setdefault(suite, cell)
            owner.setdefault(suite, name)
    return merged


def merge_kill_matrices(parts: Mapping[str, KillMatrix]) -> KillMatrix:
    """Kill-matrix shards (file name -> matrix) as the matrix one machine writes."""
    first = next(iter(parts.values()))
    for field in ("target", "mode", "commit", "engine", "suites", "selection"):
        _same(field, {name: getattr(m, field) for name, m in parts.items()})
    shards = {name: _shard_of(m.shard, name) for name, m in parts.items()}
    _check_shards(shards, {name: [f.spec.id for f in m.faults] for name, m in parts.items()})
    selection = list(first.selection or [f.spec.id for f in first.faults])
    rows: dict[str, FaultRow] = {}
    for name, matrix in parts.items():
        for row in matrix.faults:
            if row.spec.id not in selection:
                raise MergeError(f"{name}: fault {row.spec.id} is not in the selection the shards share")
            if row.spec.id in rows:
                raise MergeError(f"fault {row.spec.id} is in two shards (one is {name})")
            rows[row.spec.id] = row
    missing = [fid for fid in selection if fid not in rows]
    if missing:
        raise MergeError(f"faults {missing} are in no shard's rows")
    clean = _same_cells("clean build", {name: m.clean for name, m in parts.items()})
    settings = {s for m in parts.values() for s in m.clean_under_settings}
    under = {
        s: _same_cells(
            f"clean build under {s}",
            {name: m.clean_under_settings[s] for name, m in parts.items() if s in m.clean_under_settings},
        )
        for s in sorted(settings)
    }

    def largest(values: list[float | int | None]) -> Any:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    return replace(
        first,
        generated_at=max(m.generated_at for m in parts.values()),
        wall_s=largest([m.wall_s for m in parts.values()]),
        jobs=largest([m.jobs for m in parts.values()]),
        clean=clean,
        faults=tuple(rows[fid] for fid in selection),
        clean_under_settings=under,
        clean_and_recording_s=largest([m.clean_and_recording_s for m in parts.values()]),
        shard=None,
        selection=None,
        recordings=tuple(r for m in parts.values() for r in m.recordings),
    )


# The fields every shard of one mutation run shares: the same mutants, drawn the same way, from the same source.
MUTATION_RUN_FIELDS = (
    "target",
    "engine_version",
    "source_digest",
    "mutator",
    "operators",
    "population",
    "sample",
    "seed",
)


def merge_mutation_runs(parts: Mapping[str, MutationRun]) -> MutationRun:
    """Mutation-run shards (file name -> run) as the run one machine makes: every mutant once, in report order;
    ``wall_s`` and ``recording_s`` the largest shard's (they run at once)."""
    for field in MUTATION_RUN_FIELDS:
        _same(field, {name: getattr(run, field) for name, run in parts.items()})
    shards = {name: _shard_of(run.shard, name) for name, run in parts.items()}
    _check_shards(shards, {name: [r.mutant.id for r in run.results] for name, run in parts.items()})
    first = next(iter(parts.values()))
    return replace(
        first,
        shard=str(WHOLE),
        generated_at=max(run.generated_at for run in parts.values()),
        wall_s=max(run.wall_s for run in parts.values()),
        recording_s=max(run.recording_s for run in parts.values()),
        jobs=max(run.jobs for run in parts.values()),
        results=tuple(sorted((r for run in parts.values() for r in run.results), key=lambda r: r.mutant.order)),
    )


def _without(command: str, *flags: str) -> str:
    """``command`` without these flags and their values."""
    for flag in flags:
        command = re.sub(rf"\s{flag}(\s+|=)\S+", "", command)
    return command


def merge_release_matrices(parts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Release-matrix shards (file name -> JSON) as the JSON one machine writes."""
    for field in ("engine", "commit", "suites", "base", "selection"):
        _same(field, {name: m.get(field) for name, m in parts.items()})
    where = ("--shard", "--out", "--markdown")  # each shard writes its own file
    _same("command", {name: _without(str(m.get("command", "")), *where) for name, m in parts.items()})
    shards = {name: _shard_of(m.get("shard"), name) for name, m in parts.items()}
    _check_shards(shards, {name: [r["release"] for r in m.get("rows", [])] for name, m in parts.items()})
    first = next(iter(parts.values()))
    rows: dict[str, dict] = {}
    for name, matrix in parts.items():
        for row in matrix.get("rows", []):
            if row["release"] in rows:
                raise MergeError(f"release {row['release']} is in two shards (one is {name})")
            rows[row["release"]] = row
    missing = [r for r in first.get("selection") or [] if r not in rows]
    if missing:
        raise MergeError(f"releases {missing} are in no shard's rows")
    whole = {k: v for k, v in first.items() if k not in ("engine", "commit", "shard", "selection")}
    return {
        **whole,
        "command": _without(str(first.get("command", "")), "--shard"),
        "date": max(str(m.get("date", "")) for m in parts.values()),
        "rows": sorted(rows.values(), key=lambda row: release_order(row["release"])),
    }


def merge_files(paths: Sequence[Path], out: Path) -> str:
    """Merge the shards at ``paths`` into ``out``; returns what was merged, in a line."""
    data = {str(p): json.loads(Path(p).read_text()) for p in paths}
    kinds = {
        name: "kill" if "faults" in d else "release" if "rows" in d else "mutants" if "mutator" in d else "?"
        for name, d in data.items()
    }
    kind = _same("kind (a kill matrix has faults, a release matrix rows, a mutation run a mutator)", kinds)
    if kind == "mutants":
        try:
            runs = {name: MutationRun.from_json(d) for name, d in data.items()}
        except (KeyError, TypeError) as error:
            raise MergeError(f"a mutation run of an unexpected shape: {error!r}") from None
        run = merge_mutation_runs(runs)
        save_mutation_run(run, out)
        return f"{len(paths)} shards of the {run.target} mutation run: {len(run.results)} mutants"
    if kind == "kill":
        merged = merge_kill_matrices({name: KillMatrix.from_json(d) for name, d in data.items()})
        save(merged, out)
        return f"{len(paths)} shards of the {merged.target} kill matrix: {len(merged.faults)} faults"
    if kind == "release":
        matrix = merge_release_matrices(data)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(matrix, indent=1) + "\n")
        return f"{len(paths)} shards of a release matrix: {len(matrix['rows'])} releases"
    raise MergeError(f"{', '.join(data)}: neither a kill matrix (faults) nor a release matrix (rows)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="swa-harness merge", description=__doc__.split("\n\n")[0])
    parser.add_argument("shards", nargs="+", type=Path, help="the shards' JSONs (every shard K/N of one matrix)")
    parser.add_argument("--out", type=Path, required=True, help="where the merged matrix goes")
    args = parser.parse_args(argv)
    try:
        said = merge_files(args.shards, args.out)
    except MergeError as error:
        print(f"swa-harness merge: refused: {error}")
        return 1
    print(f"swa-harness merge: {said}, written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
