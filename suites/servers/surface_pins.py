"""The OpenAI surface's pins: what each server was seen to do, check by check and detail by detail, and the one
command that writes them.

``surface_pins.json`` holds, per server and check, the status word and every detail (``suites/servers/surface.py``).
A run of ``suites/servers/test_openai_surface_servers.py`` writes what it saw to
``reports/openai-surface-<server>.json`` and fails naming every detail that is not its pin's. Nothing else writes the
pins: ``python -m suites.servers.surface_pins REPORT...`` prints how the reports differ from them, field by field
(server, check, field: was -> now), and with ``--update`` writes them too, so that every pin change is a reviewed
diff of this file.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.paths import REPO, shown
from suites.servers.surface import SurfaceResult

PINS = Path(__file__).with_name("surface_pins.json")
REPORTS = REPO / "reports"
Checks = dict[str, dict[str, Any]]  # check -> {"status": word, "details": {field: value}}
ABSENT = "(absent)"
UPDATE = "python -m suites.servers.surface_pins --update"


@dataclass(frozen=True)
class Change:
    """One pinned detail that is not what was seen; ``field`` None: the whole check came or went."""

    server: str
    check: str
    field: str | None
    was: Any
    now: Any

    def __str__(self) -> str:
        if self.field is None:
            return f"{self.server}: {self.check}: {_show(self.was)} -> {_show(self.now)}"
        return f"{self.server}: {self.check}: {self.field}: {_show(self.was)} -> {_show(self.now)}"


def _show(value: Any) -> str:
    return value if value is ABSENT else json.dumps(value)


def observed(results: Mapping[str, SurfaceResult]) -> Checks:
    """The checks' results as the pins and reports hold them (JSON's types: read back, they compare equal)."""
    seen = {name: {"status": r.status, "details": dict(r.details)} for name, r in results.items()}
    return json.loads(json.dumps(seen))


def _flat(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One check's pin as fields: its status, then each detail."""
    return {"status": entry["status"], **entry["details"]}


def changes(server: str, was: Checks, now: Checks) -> list[Change]:
    """Every difference between a server's pins and what it was seen to do: a check that came or went (its status), a
    field that changed, came or went; none when they agree."""
    found = []
    for check in sorted(was.keys() | now.keys()):
        if check not in now or check not in was:
            old, new = (was[check]["status"], ABSENT) if check not in now else (ABSENT, now[check]["status"])
            found.append(Change(server, check, None, old, new))
            continue
        old_fields, new_fields = _flat(was[check]), _flat(now[check])
        for field in sorted(old_fields.keys() | new_fields.keys(), key=lambda f: (f != "status", f)):
            old, new = old_fields.get(field, ABSENT), new_fields.get(field, ABSENT)
            if old != new:
                found.append(Change(server, check, field, old, new))
    return found


def read_pins(path: Path = PINS) -> dict[str, Checks]:
    return json.loads(path.read_text()) if path.exists() else {}


def report_path(server: str, reports: Path = REPORTS) -> Path:
    return reports / f"openai-surface-{server}.json"


def write_report(server: str, seen: Checks, reports: Path = REPORTS) -> Path:
    """What one run saw, for the command that pins it; the report's path."""
    path = report_path(server, reports)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"server": server, "checks": seen}, indent=2, sort_keys=True) + "\n")
    return path


def read_report(path: Path) -> tuple[str, Checks]:
    report = json.loads(path.read_text())
    if not isinstance(report, dict) or not isinstance(report.get("server"), str) or "checks" not in report:
        raise ValueError(f"{path}: not an OpenAI surface report (no server and checks)")
    return report["server"], report["checks"]


def held(server: str, seen: Checks, pins: Mapping[str, Checks]) -> str | None:
    """None when ``seen`` is the server's pins; else one line naming every changed detail and how to accept them."""
    found = changes(server, pins.get(server, {}), seen)
    if not found:
        return None
    accept = f"{UPDATE} {shown(report_path(server))}"
    return f"{server}'s OpenAI surface changed in {len(found)} details: " + "; ".join(map(str, found)) + f" ({accept})"


def update(reports: Sequence[Path], pins_path: Path = PINS, write: bool = False) -> list[Change]:
    """The changes the reports make to the pins, printed one a line; written when ``write``."""
    pins = read_pins(pins_path)
    found: list[Change] = []
    for path in reports:
        server, seen = read_report(path)
        found += changes(server, pins.get(server, {}), seen)
        pins[server] = seen
    for change in found:
        print(change)
    print(f"{len(found)} changed details" + ("" if found else " (the pins hold)"))
    if write and found:
        pins_path.write_text(json.dumps(pins, indent=2, sort_keys=True) + "\n")
        print(f"wrote {shown(pins_path)}")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suites.servers.surface_pins", description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="reports/openai-surface-<server>.json, from a test run")
    parser.add_argument("--update", action="store_true", help="write the reports' servers into the pins")
    parser.add_argument("--pins", type=Path, default=PINS, help=f"the pin file (default {shown(PINS)})")
    args = parser.parse_args(argv)
    try:
        update(args.reports, args.pins, write=args.update)
    except (OSError, ValueError) as exc:
        print(f"surface_pins: {exc}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
