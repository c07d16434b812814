"""Servers shared by the tests of one pytest session (one xdist worker).

A real server's start is most of a short server test (SGLang and vLLM: 1-2.5 minutes each on 2 cores), so a test
that needs exactly the server another test of the session started (same engine, checkpoint, served name, graph mode,
flags, variables and fault: everything in its spec but the port) takes that one instead of starting its own; all of
them stop when the session ends. ``suites/servers/conftest.py`` holds them (``shared_servers``) and, under
``--dist loadfile``, runs each test of ``SHARED_WITH`` on the worker of the file whose server it shares.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from harness.servers.base import ServerKind, ServerSpec
from harness.servers.lifecycle import ServerProcess

SURFACE_ROW = (
    "suites/servers/test_openai_surface_servers.py::test_each_servers_openai_surface_is_what_it_was_seen_to_be"
)
# A test run by another file's worker, so that it finds that file's server running: its node id -> that file.
SHARED_WITH = {
    f"{SURFACE_ROW}[sglang]": "suites/servers/test_sglang_server.py",
    f"{SURFACE_ROW}[vllm]": "suites/servers/test_vllm_server.py",
}


@dataclass
class SharedServers:
    """The session's servers by what started them; each one's log under ``logs``."""

    logs: Path
    running: dict[str, ServerProcess] = field(default_factory=dict)
    starts: int = 0

    def get(self, engine: ServerKind, spec: ServerSpec, timeout: float) -> tuple[ServerProcess, bool]:
        """The running server for ``spec`` (started now if none is, or the last one died) and whether it was already
        running."""
        key = repr((engine.name, replace(spec, port=0)))
        server = self.running.get(key)
        if server is not None and server.alive():
            return server, True
        self.starts += 1
        log = self.logs / f"{self.starts}-{engine.name}" / "server.log"
        log.parent.mkdir()
        self.running[key] = engine.start(spec, log_path=log, timeout=timeout)
        return self.running[key], False

    def stop(self) -> None:
        """Stop every server, each with its whole process group; name any that outlived its stop."""
        alive = []
        for server in self.running.values():
            code = server.stop()
            if server.alive():
                alive.append(f"{server.log_path.name} (exit {code})")
        self.running.clear()
        assert not alive, f"shared servers outlived their stop: {', '.join(alive)}"
