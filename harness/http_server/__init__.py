"""OpenAI-compatible HTTP server over the harness engine (aiohttp).

* ``worker.EngineWorker``: the one thread that owns the Engine; batches concurrent requests.
* ``app.build_app``: /v1/completions, /v1/chat/completions, /v1/models, /health.
* ``stream``: ``stream: true`` as Server-Sent Events, text per engine step.
* ``cli.main``: ``python -m harness.http_server``; prints ``SWA_HARNESS_SERVER_READY http://HOST:PORT``.

Jobs start it through ``harness.servers`` (the ``harness`` engine); nothing is imported here, so
``python -m harness.http_server`` does not import its own modules twice.
"""
