"""The reuse layer, one room: what identifies the build that produced a result, and the two caches keyed by it.

**Build identity** (``code_fingerprint``, ``weights_fingerprint``, ``tokenizer_fingerprint``, ``server_build``): the
checkpoint's bytes and the code's git state. The harness server reports them on /health, the runner compares them
before a start (two arms that will serve different weights), the provenance records them, and both keys below are made
of them; one module, so that every floor above computes them the same way.

**The report's tokenizer memo** (``memoized_tokenize``): a report splits every flip into tokens with the checkpoint's
own tokenizer, loaded once per process and keyed by the folder *and* the bytes of its tokenizer.json (a checkpoint
rewritten in place is another tokenizer). The history's series is ``harness.evals.history``.

**The resume cache's key**: everything one lm-eval run's answers depend on, and nothing else (``harness.jobs.cache``
keeps the answers under it; ``--resume`` reuses them). A field that changes misses the cache:

| field | holds | read from |
|---|---|---|
| ``checkpoint`` | each file of the checkpoint folder that shapes an answer by its sha256, None when absent (one row each below, ``CHECKPOINT_FILES``); a hub id as given | the checkpoint |
| ``code`` | the harness's commit and a digest of its uncommitted diff | ``code_fingerprint`` |
| ``engine``, ``flags``, ``fault`` | what the arm launched: engine kind, the model's and the arm's flags, the injected fault | the plan |
| ``env`` | the arm's variables, each file one names (a source patch) by its content | the plan, the files |
| ``served`` | what the server says it serves: model, build, settings, and the graph mode that really ran ("auto" resolved); where it reports none of that, what it was launched with | ``ServedIdentity`` |
| ``url`` | an external server's address (nothing launched) | the plan |
| ``tasks`` | each task's lm-eval name and a digest of its task file, helpers and data (prompt template, generation settings, items) | ``suites/accuracy``, ``fixtures/data`` |
| ``items`` | task -> items scored | the plan |
| ``requests`` | prompts per request, concurrency, chat or completions, the model's generation budgets | the plan |

Left out, because no answer depends on them: the arm's name and purpose, the client's timeout and retries, the
output folder, and every other file of the checkpoint folder (its card, eval results, training notes).

The checkpoint's files in the key, each one row of ``CHECKPOINT_FILES`` (a glob matches each shard apart):
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.evals.compare import Tokenize
from harness.paths import REPO
from harness.seams import seam

# -- build identity --------------------------------------------------------------------------------------

HASH_WEIGHTS_UP_TO = 512 * 1024 * 1024  # bigger checkpoints are identified by size and time, not hashed at startup


def git(*args: str, timeout: float | None = None, cwd: Path = REPO) -> str:
    """Raw stdout of a git command in ``cwd`` (empty when git fails; OSError when git is missing)."""
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout).stdout


def file_sha256(path: Path) -> str | None:
    """Hex digest of a file, read in chunks (checkpoints can be large); None when it is missing."""
    if not Path(path).is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def weights_sha256(model: Path) -> str | None:
    """Hex digest of the checkpoint's weights, or None when there is no ``model.safetensors``."""
    return file_sha256(Path(model) / "model.safetensors")


def code_fingerprint() -> str:
    """The checkout's commit, plus a digest of its uncommitted diff; "unknown" without git."""
    try:
        head = git("rev-parse", "HEAD", timeout=10).strip()
        diff = git("diff", "HEAD", timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not head:
        return "unknown"
    return head + (f"+{hashlib.sha256(diff.encode()).hexdigest()[:16]}" if diff else "")


def checkout_state(cwd: Path = REPO) -> dict[str, Any]:
    """A git checkout's full sha and whether tracked files have uncommitted changes."""
    try:
        sha = git("rev-parse", "HEAD", timeout=10, cwd=cwd).strip()
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", timeout=10, cwd=cwd).strip())
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "", False
    return {"commit": sha or "unknown", "dirty": dirty}


def weights_fingerprint(model_path: str | Path) -> str | None:
    """sha256 of ``model.safetensors`` (size and mtime past HASH_WEIGHTS_UP_TO); None without one."""
    weights = Path(model_path) / "model.safetensors"
    if not weights.is_file():
        return None
    stat = weights.stat()
    if stat.st_size > HASH_WEIGHTS_UP_TO:
        return f"size:{stat.st_size},mtime:{int(stat.st_mtime)}"
    return f"sha256:{weights_sha256(Path(model_path))}"


def tokenizer_fingerprint(model_path: str | Path) -> str | None:
    """sha256 of ``tokenizer.json``; None without one. Other weights are one difference, another tokenizer another."""
    digest = file_sha256(Path(model_path) / "tokenizer.json")
    return f"sha256:{digest}" if digest else None


def server_build(model_path: str | Path, **settings: Any) -> dict[str, Any]:
    """The build /health reports: code, weights, tokenizer, and ``settings`` (dtype, device, injected fault...)."""
    return {
        "code": code_fingerprint(),
        "weights": weights_fingerprint(model_path),
        "tokenizer": tokenizer_fingerprint(model_path),
        **settings,
    }


# -- the resume cache's key ------------------------------------------------------------------------------

FileDigests = tuple[tuple[str, str | None], ...]  # (file name, sha256 or None when absent)


@dataclass(frozen=True)
class CheckpointFile:
    """A file of a checkpoint folder that shapes answers (a glob: each shard of sharded weights): a row of the key."""

    pattern: str
    shapes: str  # what of an answer it decides, for the docstring's table

    def digests(self, folder: Path) -> FileDigests:
        """Each file the row matches by its content; the pattern with None when none is there (absent is a state
        too: a chat template deleted is another prompt)."""
        return tuple((path.name, file_sha256(path)) for path in sorted(folder.glob(self.pattern))) or (
            (self.pattern, None),
        )

    def row(self) -> str:
        return f"| ``{self.pattern}`` | {self.shapes} |"


CHECKPOINT_FILES: tuple[CheckpointFile, ...] = (
    CheckpointFile("model.safetensors", "the weights"),
    CheckpointFile("model-*-of-*.safetensors", "the weights, sharded"),
    CheckpointFile("model.safetensors.index.json", "which shard holds each tensor"),
    CheckpointFile("config.json", "the architecture: sliding window and which layers slide, softcaps, rope; stop ids"),
    CheckpointFile("generation_config.json", "a server's default sampling settings and its stop ids"),
    CheckpointFile("tokenizer.json", "the tokens of every prompt and answer"),
    CheckpointFile("tokenizer.model", "a SentencePiece tokenizer, read where there is no tokenizer.json"),
    CheckpointFile("tokenizer_config.json", "BOS and the special tokens; a chat template written inline"),
    CheckpointFile("special_tokens_map.json", "the special tokens"),
    CheckpointFile("added_tokens.json", "tokens added to the vocabulary"),
    CheckpointFile("chat_template.jinja", "the chat template"),
    CheckpointFile("chat_template.json", "the chat template, in its older file"),
)

__doc__ = "\n".join((__doc__ or "", "| file | shapes |", "|---|---|", *(f.row() for f in CHECKPOINT_FILES), ""))


@dataclass(frozen=True)
class ResponseKey:
    """Everything that decides the responses of one lm-eval run against one server (the table above)."""

    checkpoint: FileDigests
    code: str
    engine: str
    flags: tuple[str, ...]
    fault: str | None
    env: tuple[tuple[str, str], ...]
    served: str  # canonical JSON of the served identity
    url: str | None
    tasks: tuple[tuple[str, str], ...]
    items: tuple[tuple[str, int], ...]
    requests: tuple[tuple[str, Any], ...]

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True, default=str).encode()).hexdigest()[:16]

    @staticmethod
    def checkpoint_of(folder: Path, name: str) -> FileDigests:
        """Every file of ``CHECKPOINT_FILES`` in the checkpoint folder, by its content; a hub id (no such folder)
        as given."""
        if not folder.is_dir():
            return (("hub id", name),)
        return tuple(digest for file in CHECKPOINT_FILES for digest in file.digests(folder))

    @seam("resume-key-drops-env")
    @staticmethod
    def env_of(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """An arm's variables, each file one names by its content."""
        return tuple(sorted((name, _env_value(value)) for name, value in env.items()))

    @seam("resume-key-drops-generation-budget")
    @staticmethod
    def requests_of(
        batch_size: int, concurrency: int, chat: bool, max_gen_toks: Mapping[str, int]
    ) -> tuple[tuple[str, Any], ...]:
        """How lm-eval asks: prompts per request and concurrency (the engine's batches), the endpoint, and the
        model's generation budgets (a longer budget finishes answers a shorter one cut)."""
        return (
            ("batch_size", batch_size),
            ("concurrency", concurrency),
            ("chat", chat),
            ("max_gen_toks", tuple(sorted(max_gen_toks.items()))),
        )


def _env_value(value: str) -> str:
    """A variable's value, and the content of the file it names (a source patch edited in place is another run)."""
    path = Path(value) if Path(value).is_absolute() else REPO / value
    try:
        is_file = bool(value) and len(value) < 4096 and path.is_file()
    except OSError:
        is_file = False
    return f"{value}@{file_sha256(path)}" if is_file else value


# -- the report's tokenizer memo -------------------------------------------------------------------------


class TokenizerMemo:
    """Loaded tokenizers, one per checkpoint for the life of the process (a report splits every flip with one)."""

    loaded: dict[tuple[str, str | None], Tokenize] = {}

    @seam("tokenizer-memo-keyed-by-folder")
    @staticmethod
    def key(path: str) -> tuple[str, str | None]:
        """The folder and the bytes of its tokenizer.json: a checkpoint rewritten in place is another tokenizer."""
        return path, tokenizer_fingerprint(path)


def memoized_tokenize(path: str) -> Tokenize:
    """The checkpoint's tokenizer as a text -> token strings function, loaded once per (folder, tokenizer.json)."""
    key = TokenizerMemo.key(path)
    if key not in TokenizerMemo.loaded:
        from harness.model import Tokenizer  # imported here: harness.model pulls in torch, needed only for this

        tok = Tokenizer.from_dir(Path(path))
        TokenizerMemo.loaded[key] = lambda text: [
            tok.decode([i]) for i in tok.tokenizer.encode(text, add_special_tokens=False).ids
        ]
    return TokenizerMemo.loaded[key]
