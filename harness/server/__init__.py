"""OpenAI-compatible HTTP server over the harness engine (aiohttp), and a launcher for it.

* ``worker.EngineWorker``: the one thread that owns the Engine; batches concurrent requests.
* ``app.build_app``: /v1/completions, /v1/chat/completions, /v1/models, /health.
* ``cli.main``: ``python -m harness.server``; prints ``SWA_HARNESS_SERVER_READY http://HOST:PORT``.
* ``launch.launch_server``: start that as a subprocess and wait for the ready line.

Only the launcher is imported eagerly: it needs neither torch nor aiohttp.
"""

from harness.server.launch import ServerLaunchError, ServerProcess, launch_server

__all__ = ["ServerLaunchError", "ServerProcess", "launch_server"]
