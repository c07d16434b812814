"""The server suites' session: the servers their tests share (``suites/servers/shared.py``), the checkpoint SGLang's
shared server loads, the xdist scheduling that runs a sharing test beside the server it shares, and the cases
``check_smoke(name=value)`` marks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fixtures.tokenized import tokenized_checkpoint
from suites.servers.shared import SHARED_WITH, SharedServers


@pytest.fixture(scope="session")
def shared_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedServers]:
    servers = SharedServers(tmp_path_factory.mktemp("shared-servers"))
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="session")
def mellum_words_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The random Mellum with a word-level tokenizer that SGLang's roomy server loads (test_sglang_server.py, and the
    OpenAI surface row that shares that server): one folder per session, so both name the same checkpoint."""
    return tokenized_checkpoint(tmp_path_factory.mktemp("sglang-server") / "ckpt", arch="mellum", chat_template=None)


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``check_smoke(name=value, ...)`` marks only the cases whose parameters have those values: a parametrize case
    crossed with a parametrized fixture (vLLM's tight pool, on Gemma2 only); every other case loses the mark, so
    ``-m check_smoke`` (``swa-harness check``'s server smoke) never selects it."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        item.own_markers[:] = [
            mark
            for mark in item.own_markers
            if mark.name != "check_smoke" or all(k in params and params[k] == v for k, v in mark.kwargs.items())
        ]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadfile`` (``nox -s vllm``), each test of ``SHARED_WITH`` goes with the file whose server it
    shares; else xdist's own scheduling."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharingLoadFile(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return SHARED_WITH.get(nodeid) or super()._split_scope(nodeid)

    return SharingLoadFile(config, log)
