"""The clean build's recording, kept between kill-matrix runs and reused while nothing that produced it changed.

A test-impact matrix (``harness.faults.matrix``) first runs every suite on the clean build with recording on: which
tests reach each fault's code, and the clean verdicts. On SGLang that is most of a run (164 s of 254 s quiet, 473 s
of 652 s loaded), and it is the same every time the code under test, the suites and the settings are. So it is
stored beside the matrix, in ``<the matrix's folder>/.kill-recording-<target>/`` (``reports/`` is git-ignored but
for the committed matrices: a recording is a few MB of node ids, a cache, never a record), one entry per settings a
fault runs under (``clean`` as it ships, e.g. ``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND-python``), each the per-suite
impact JSONs, the clean outcomes and the seconds the recording took. ``--recording-dir`` puts it elsewhere.

An entry is reused only when its key equals this run's key field by field; any field that differs is named and the
entry recorded again (``--fresh``: always). The key, everything that produced a recording:

| field | what | why it changes a recording |
|---|---|---|
| ``target`` | the matrix target (``harness``, ``sglang``, ``vllm``) | another target's suites and code |
| ``engine`` | the engine package's version and a sha256 of every ``.py`` file in it (``sglang``, ``vllm``: the installed package the suites import, the files the catalog edits among them); ``harness``: none, the suites digest holds it | the code the tests run and the faults edit |
| ``suites`` | a sha256 of what the target's suites run: their files, every ``conftest.py`` above them, the matrix's own modules and plugins, and every module of ``harness``, ``suites`` and ``fixtures`` these import, followed import by import (``from``, ``import``, inside functions too, and a dotted ``"harness.x.y"`` string, how targets and plugins are named), with the data files beside each (``csrc/``, JSON), the ``fixtures/`` tree whole and ``pyproject.toml``; git's tracked and unignored files only, so build outputs never count | the tests, their fixtures and the harness code they import (the catalogs' code map too); an edit elsewhere (another target's suites, the server suites, a tool no suite imports) keeps the recording |
| ``settings`` | the fault settings the entry was recorded under (``K=V``, none for the clean build as it ships) | the code paths SGLang takes |
| ``tree_core`` | ``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND`` as the runs see it (the settings' value over the environment's) | which tree core (Rust or Python) the prefix suites drive |
| ``env`` | every other ``SGLANG_*``, ``VLLM_*``, ``SWA_HARNESS_*`` variable and ``PYTHONPATH`` in the environment, but those each run sets itself (``ENV_SET_PER_RUN``) | e.g. ``SGLANG_INVARIANT_CHECK`` runs SGLang's own checks; a patch file changes its code |
| ``python``, ``torch`` | their versions | what the tests compute |

A clean build that did not pass is never stored (a crash or a flake must not be kept).
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.env import (
    CACHE_ENV,
    DURATIONS_ENV,
    IMPACT_CODE_ENV,
    IMPACT_LINES_ENV,
    MUTANT_ENV,
    FAULT_ENV,
    HYPOTHESIS_ENV,
    IMPACT_ENV,
    KERNEL_STORE_ENV,
    SELECT_ENV,
    SGLANG_FAULT_ENV,
    STOP_ON_KILL_ENV,
    VERDICTS_ENV,
    VLLM_FAULT_ENV,
)
from harness.paths import REPO

TREE_CORE_ENV = "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"
ENGINE_PACKAGES: dict[str, tuple[str, ...]] = {"harness": (), "sglang": ("sglang",), "vllm": ("vllm",)}
PACKAGES = ("harness", "suites", "fixtures")
ALWAYS = ("conftest.py", "pyproject.toml", "fixtures")  # pytest's config and root conftest; fixtures' data, whole
# The matrix's own code and the plugins its runs load (``-p``): what a recording's runs are, beside the suites.
MATRIX_MODULES = ("harness/faults/matrix.py", "harness/faults/verdicts.py", "harness/faults/impact.py")
ENV_PREFIXES = ("SGLANG_", "VLLM_", "SWA_HARNESS_")
ENV_NAMES = ("PYTHONPATH",)
# Set (or dropped) by every run of the matrix itself, or a place only: never part of what a recording saw.
ENV_SET_PER_RUN = frozenset(
    {
        FAULT_ENV,
        SGLANG_FAULT_ENV,
        VLLM_FAULT_ENV,
        HYPOTHESIS_ENV,
        VERDICTS_ENV,
        STOP_ON_KILL_ENV,
        IMPACT_ENV,
        IMPACT_CODE_ENV,
        IMPACT_LINES_ENV,
        MUTANT_ENV,
        DURATIONS_ENV,
        SELECT_ENV,
        KERNEL_STORE_ENV,
        CACHE_ENV,
    }
)
KEY_FILE = "key.json"
OUTCOMES_FILE = "outcomes.json"

Settings = tuple[tuple[str, str], ...]  # environment a run needs beyond the fault's switch (K, V) pairs


@dataclass(frozen=True)
class RecordingKey:
    """Everything that produced a recording (the table in the module docstring); equal keys, equal recordings."""

    target: str
    engine: str
    suites: str
    settings: str
    tree_core: str
    env: str
    python: str
    torch: str

    def differences(self, other: RecordingKey) -> list[str]:
        """Each field that differs from ``other`` (the stored key): ``engine: <stored> -> <now>``."""
        return [
            f"{f.name}: {getattr(other, f.name) or '(none)'} -> {getattr(self, f.name) or '(none)'}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]

    def short(self) -> str:
        """One line for the log: each field, digests shortened."""
        return ", ".join(f"{f.name} {getattr(self, f.name) or '(none)'}" for f in fields(self))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RecordingKey:
        return cls(**{f.name: str(data.get(f.name, "")) for f in fields(cls)})


def _digest_files(root: Path, paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def engine_digest(packages: tuple[str, ...]) -> str:
    """Each engine package's version and a digest of its ``.py`` files, found without importing it ("" for none)."""
    parts = []
    owners = metadata.packages_distributions()
    for package in packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            parts.append(f"{package} not installed")
            continue
        root = Path(next(iter(spec.submodule_search_locations)))
        dist = (owners.get(package) or [package])[0]
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            version = "?"
        files = [p for p in root.rglob("*.py") if "__pycache__" not in p.parts]
        parts.append(f"{dist} {version} py:{_digest_files(root, files)}")
    return "; ".join(parts)


def _listed(repo: Path) -> set[Path]:
    """The repo's files git would commit (tracked, or untracked and not ignored); every file without git."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z", "--", *PACKAGES, *ALWAYS],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        found = {repo / name for name in out.split("\0") if name}
    except (OSError, subprocess.SubprocessError):
        found = {p for name in (*PACKAGES, *ALWAYS) for p in [repo / name, *(repo / name).rglob("*")]}
    return {p for p in found if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


_FROM = re.compile(r"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#]*)", re.M)
_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^\n#]+)", re.M)
_DOTTED = re.compile(rf"[\"']((?:{'|'.join(PACKAGES)})(?:\.\w+)+)(?::\w+)?[\"']")


def _imported(path: Path, repo: Path) -> set[str]:
    """The dotted modules ``path`` may import: its import statements anywhere in it (``from x import y``: ``x`` and
    ``x.y``, relative ones resolved) and every string shaped like a module of ``PACKAGES`` (how targets and plugins
    are named). Read as text, not parsed: a few times faster, and a name too many only widens the digest."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return set()
    package = path.relative_to(repo).with_suffix("").parts[:-1]
    names: set[str] = set(_DOTTED.findall(text))
    for match in _IMPORT.finditer(text):
        names |= {part.split(" as ")[0].strip() for part in match.group(1).split(",")}
    for dots, module, what in _FROM.findall(text):
        base = module
        if dots:
            parent = package[: len(package) - len(dots) + 1]
            base = ".".join([*parent, *([module] if module else [])])
        items = what.strip("()").replace("\n", " ").split(",")
        names |= {base} | {f"{base}.{item.split(' as ')[0].strip()}" for item in items if item.strip()}
    return {n for n in names if n.split(".")[0] in PACKAGES}


def _module_files(name: str, repo: Path) -> list[Path]:
    """The files importing ``name`` runs: each package's ``__init__.py`` on the way, and the module itself."""
    parts = name.split(".")
    files = [repo.joinpath(*parts[:i], "__init__.py") for i in range(1, len(parts) + 1)]
    return [*files, repo.joinpath(*parts[:-1], parts[-1] + ".py")]


def suites_digest(suite_paths: tuple[str, ...] = ("suites",), repo: Path = REPO) -> str:
    """A digest of what the suites at ``suite_paths`` run (the ``suites`` row of the key table): their files and the
    closure of their imports within the repo, each module's folder's data files, and ``ALWAYS``."""
    listed = _listed(repo)
    todo: list[Path] = []
    for rel in (*suite_paths, *MATRIX_MODULES):
        root = repo / rel
        todo += [p for p in listed if p == root or root in p.parents]
        todo += [d / "conftest.py" for d in [root, *root.parents] if repo in d.parents or d == repo]
    kept: set[Path] = {p for p in listed if any(p == repo / a or repo / a in p.parents for a in ALWAYS)}
    data: dict[Path, set[Path]] = {}  # a package folder -> its data files, down to the next package below it
    for p in listed:
        if p.suffix != ".py":
            owner = next((d for d in p.parents if repo / d / "__init__.py" in listed or d == repo), repo)
            data.setdefault(owner, set()).add(p)
    while todo:
        path = todo.pop()
        if path in kept or path not in listed:
            continue
        kept.add(path)
        kept |= data.pop(path.parent, set())
        if path.suffix == ".py":
            for name in _imported(path, repo):
                todo += _module_files(name, repo)
    return _digest_files(repo, list(kept))


def _torch_version() -> str:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "not installed"


@dataclass(frozen=True)
class Fingerprint:
    """What a recording's key holds besides its settings: computed once per matrix run (hashing SGLang's 4,700 files
    takes about half a second warm)."""

    target: str
    engine: str
    suites: str
    environ: tuple[tuple[str, str], ...]
    python: str
    torch: str

    @classmethod
    def now(
        cls, target: str, suite_paths: tuple[str, ...] = ("suites",), environ: Mapping[str, str] | None = None
    ) -> Fingerprint:
        environ = os.environ if environ is None else environ
        kept = tuple(
            sorted(
                (k, v)
                for k, v in environ.items()
                if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and k not in ENV_SET_PER_RUN
            )
        )
        return cls(
            target=target,
            engine=engine_digest(ENGINE_PACKAGES.get(target, ())),
            suites=suites_digest(suite_paths),
            environ=kept,
            python=platform.python_version(),
            torch=_torch_version(),
        )

    def key(self, settings: Settings) -> RecordingKey:
        """The key of a recording under ``settings``: the tree core as the runs see it, the rest of the environment."""
        seen = {**dict(self.environ), **dict(settings)}
        return RecordingKey(
            target=self.target,
            engine=self.engine,
            suites=self.suites,
            settings=" ".join(f"{k}={v}" for k, v in settings),
            tree_core=seen.get(TREE_CORE_ENV, ""),
            env=" ".join(f"{k}={v}" for k, v in self.environ if k != TREE_CORE_ENV),
            python=self.python,
            torch=self.torch,
        )


@dataclass(frozen=True)
class StoredRecording:
    """One entry: its key, each suite's clean outcome (the matrix's ``SuiteOutcome`` JSON) and impact JSON path, and
    the seconds it took when it was recorded."""

    key: RecordingKey
    outcomes: Mapping[str, Mapping[str, Any]]
    impacts: Mapping[str, Path]
    seconds: float
    recorded_at: str


@dataclass(frozen=True)
class Lookup:
    """What a lookup found: the entry to reuse, or None and why it must be recorded."""

    stored: StoredRecording | None
    why: str


def slug(settings: Settings) -> str:
    """The entry's folder: ``clean`` as it ships, else its settings (``SGLANG_..._BACKEND-python``)."""
    return "clean" if not settings else "+".join(f"{k}-{v}" for k, v in settings).replace("/", "_")


@dataclass(frozen=True)
class RecordingCache:
    """The entries of one target's recordings under ``root``."""

    root: Path
    fingerprint: Fingerprint

    @classmethod
    def beside(
        cls, matrix_path: Path, target: str, suite_paths: tuple[str, ...], root: Path | None = None
    ) -> RecordingCache:
        folder = root or Path(matrix_path).parent / f".kill-recording-{target}"
        return cls(folder, Fingerprint.now(target, suite_paths))

    def lookup(self, settings: Settings, suites: list[str], *, fresh: bool = False) -> Lookup:
        """The stored entry when its key equals this run's, else None and the reason."""
        folder = self.root / slug(settings)
        if fresh:
            return Lookup(None, "--fresh")
        if not (folder / KEY_FILE).is_file():
            return Lookup(None, f"no recording stored in {folder}")
        try:
            stored_key = RecordingKey.from_json(json.loads((folder / KEY_FILE).read_text()))
            body = json.loads((folder / OUTCOMES_FILE).read_text())
        except (OSError, ValueError) as error:
            return Lookup(None, f"the stored recording in {folder} is unreadable ({error})")
        differs = self.fingerprint.key(settings).differences(stored_key)
        if differs:
            return Lookup(None, "; ".join(differs))
        impacts = {suite: folder / f"{suite}.impact.json" for suite in suites}
        missing = [s for s in suites if s not in body.get("outcomes", {}) or not impacts[s].is_file()]
        if missing:
            return Lookup(None, f"the stored recording has no suite {', '.join(missing)}")
        return Lookup(
            StoredRecording(
                key=stored_key,
                outcomes={s: body["outcomes"][s] for s in suites},
                impacts=impacts,
                seconds=float(body.get("seconds", 0.0)),
                recorded_at=str(body.get("recorded_at", "")),
            ),
            "",
        )

    def store(
        self, settings: Settings, outcomes: Mapping[str, Mapping[str, Any]], impacts: Mapping[str, Path], seconds: float
    ) -> Path:
        """Keep a recording (the key written last: a half-written entry has none and is recorded again)."""
        folder = self.root / slug(settings)
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        for suite, path in impacts.items():
            shutil.copyfile(path, folder / f"{suite}.impact.json")
        body = {
            "outcomes": dict(outcomes),
            "seconds": seconds,
            "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        (folder / OUTCOMES_FILE).write_text(json.dumps(body))
        (folder / KEY_FILE).write_text(json.dumps(asdict(self.fingerprint.key(settings)), indent=1))
        return folder
