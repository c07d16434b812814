"""The resume cache's key: everything one lm-eval run's answers depend on, and nothing else (``harness.jobs.cache``
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
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.fingerprint import file_sha256
from harness.paths import REPO
from harness.seams import seam

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
