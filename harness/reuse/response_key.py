"""The resume cache's key: everything one lm-eval run's answers depend on, and nothing else (``harness.jobs.cache``
keeps the answers under it; ``--resume`` reuses them). A field that changes misses the cache:

| field | holds | read from |
|---|---|---|
| ``weights`` | sha256 of ``model.safetensors`` (a hub id as given) | the checkpoint |
| ``tokenizer`` | sha256 of ``tokenizer.json``, and of the files that shape prompts beside it (chat template, special tokens) | the checkpoint |
| ``code`` | the harness's commit and a digest of its uncommitted diff | ``code_fingerprint`` |
| ``engine``, ``flags``, ``fault`` | what the arm launched: engine kind, the model's and the arm's flags, the injected fault | the plan |
| ``env`` | the arm's variables, each file one names (a source patch) by its content | the plan, the files |
| ``served`` | what the server says it serves: model, build, settings, and the graph mode that really ran ("auto" resolved); where it reports none of that, what it was launched with | ``ServedIdentity`` |
| ``url`` | an external server's address (nothing launched) | the plan |
| ``tasks`` | each task's lm-eval name and a digest of its task file, helpers and data (prompt template, generation settings, items) | ``suites/accuracy``, ``fixtures/data`` |
| ``items`` | task -> items scored | the plan |
| ``requests`` | prompts per request, concurrency, chat or completions, the model's generation budgets | the plan |

Left out, because no answer depends on them: the arm's name and purpose, the client's timeout and retries, the
output folder.
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


@dataclass(frozen=True)
class ResponseKey:
    """Everything that decides the responses of one lm-eval run against one server (the table above)."""

    weights: str | None
    tokenizer: tuple[tuple[str, str | None], ...]
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
