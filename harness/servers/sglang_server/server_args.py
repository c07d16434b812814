"""Parse an arm's server flags with SGLang's own command-line parser, on any machine with SGLang installed.

``sglang.launch_server`` builds its parser as ``ServerArgs.add_cli_args(argparse.ArgumentParser())``
and turns the namespace into a ``ServerArgs`` record with ``ServerArgs.from_cli_args``; both run on
CPU (the SGLang target's install, ``nox -s sglang``). Resolution (``resolve_once``: the model's
config from the hub, the GPU, memory sizing) is the server's start-up and is not run here.

The parser here differs from SGLang's in one respect: an error raises :class:`InvalidServerArgs`
instead of printing the usage and exiting, and a deprecated spelling (``--disable-cuda-graph``) is
reported, so a plan can refuse flags that only parse with a warning.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Mapping, Sequence


class InvalidServerArgs(ValueError):
    """SGLang's parser refused the flags (unknown flag, bad value, bad choice)."""


@dataclass(frozen=True)
class ParsedServerArgs:
    server_args: Any  # sglang.srt.server_args.ServerArgs
    deprecated: tuple[str, ...]  # deprecated flags the argv used

    def field(self, name: str) -> Any:
        return getattr(self.server_args, name)


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise InvalidServerArgs(message)


def sglang_parser() -> argparse.ArgumentParser:
    """SGLang's server parser (needs ``sglang`` importable: on CPU, ``load_target("sglang")`` first)."""
    from sglang.srt.server_args import ServerArgs

    parser = _RaisingParser(prog="sglang.launch_server", exit_on_error=False, add_help=False)
    ServerArgs.add_cli_args(parser)
    return parser


def parse_server_args(argv: Sequence[str], parser: argparse.ArgumentParser | None = None) -> ParsedServerArgs:
    """``argv`` (the flags after ``python -m sglang.launch_server``) as SGLang's ``ServerArgs``."""
    from sglang.srt.server_args import ServerArgs

    parser = parser or sglang_parser()
    try:
        namespace = parser.parse_args(list(argv))
    except argparse.ArgumentError as exc:  # exit_on_error=False routes some errors here instead of error()
        raise InvalidServerArgs(str(exc)) from None
    deprecated = tuple(
        token
        for token in argv
        if token.startswith("--")
        and type(parser._option_string_actions.get(token.split("=", 1)[0])).__name__.startswith("Deprecated")
    )
    try:
        record = ServerArgs.from_cli_args(namespace)
    except (TypeError, ValueError) as exc:
        raise InvalidServerArgs(f"ServerArgs refused the parsed flags: {exc}") from exc
    return ParsedServerArgs(record, deprecated)


def check_arm(
    argv: Sequence[str],
    expect: Mapping[str, Any],
    parser: argparse.ArgumentParser | None = None,
    *,
    allow_deprecated: bool = False,
) -> ParsedServerArgs:
    """Parse ``argv`` and check that it set every ``expect`` field; raises :class:`InvalidServerArgs`."""
    parsed = parse_server_args(argv, parser)
    if parsed.deprecated and not allow_deprecated:
        raise InvalidServerArgs(f"deprecated flag(s) {', '.join(parsed.deprecated)}: use the current spelling")
    wrong = {name: parsed.field(name) for name, value in expect.items() if parsed.field(name) != value}
    if wrong:
        raise InvalidServerArgs(f"flags {' '.join(argv)} did not set {dict(expect)}: ServerArgs has {wrong}")
    return parsed
