"""The server suites' session: the servers their tests share (``suites/servers/shared.py``), the checkpoint SGLang's
shared server loads, and the xdist scheduling that runs a sharing test beside the server it shares."""

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
