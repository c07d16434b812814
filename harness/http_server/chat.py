"""Chat messages -> a prompt: the checkpoint's own chat template when it ships one, else a plain fallback.

Template source, first found: ``chat_template`` in tokenizer_config.json (a string, or a list of
``{"name", "template"}`` where "default" is used), then a ``chat_template.jinja`` file. It is
rendered the way transformers' ``apply_chat_template`` does (sandboxed jinja2, ``trim_blocks``,
``lstrip_blocks``, ``raise_exception``, ``tojson``, ``add_generation_prompt=True``, the special
tokens as variables) and the text is tokenized WITHOUT adding special tokens, because the template
writes BOS itself: this gives the ids transformers would.

Fallback (no template): one ``"<role>: <content>\\n"`` line per message, then ``"assistant:"``,
sent as ordinary completion text (so the tokenizer adds BOS as it does for /v1/completions).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from harness.model import Tokenizer
from harness.http_server.protocol import ApiError, ChatMessage, Prompt


def fallback_prompt(messages: Sequence[ChatMessage]) -> str:
    """The documented plain rendering used when the checkpoint has no chat template."""
    return "".join(f"{m.role}: {m.content}\n" for m in messages) + "assistant:"


@dataclass
class ChatRenderer:
    tokenizer: Tokenizer
    template: jinja2.Template | None = None
    template_error: str | None = None  # the checkpoint's template exists but does not compile
    special_tokens: dict[str, str] | None = None

    @property
    def source(self) -> str:
        return "fallback" if self.template is None and self.template_error is None else "chat_template"

    @classmethod
    def from_dir(cls, path: str | Path, tokenizer: Tokenizer) -> ChatRenderer:
        path = Path(path)
        config = _read_json(path / "tokenizer_config.json")
        source = _template_source(config.get("chat_template"))
        if source is None and (path / "chat_template.jinja").is_file():
            source = (path / "chat_template.jinja").read_text()
        specials = {
            k: v for k, v in ((k, _token_text(v)) for k, v in config.items() if k.endswith("_token")) if v is not None
        }
        if source is None:
            return cls(tokenizer, special_tokens=specials)
        try:
            return cls(tokenizer, _environment().from_string(source), special_tokens=specials)
        except jinja2.TemplateError as exc:
            return cls(
                tokenizer,
                template_error=f"the checkpoint's chat template does not compile: {exc}",
                special_tokens=specials,
            )

    def prompt(self, messages: Sequence[ChatMessage]) -> Prompt:
        """Token ids from the template, or fallback text for the engine to encode."""
        if self.template_error is not None:
            raise ApiError(self.template_error, status=500, type="server_error")
        if self.template is None:
            return fallback_prompt(messages)
        try:
            text = self.template.render(
                messages=[{"role": m.role, "content": m.content} for m in messages],
                add_generation_prompt=True,
                **(self.special_tokens or {}),
            )
        except jinja2.TemplateError as exc:  # e.g. raise_exception("roles must alternate")
            raise ApiError(f"the chat template refused these messages: {exc}", param="messages") from exc
        return self.tokenizer.tokenizer.encode(text, add_special_tokens=False).ids


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _template_source(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        return named.get("default")
    return None


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):  # serialized AddedToken
        value = value.get("content")
    return value if isinstance(value, str) else None


def _read_json(file: Path) -> dict[str, Any]:
    return json.loads(file.read_text()) if file.is_file() else {}
