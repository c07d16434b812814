"""Servers: how an arm of an accuracy job is served (the harness server, SGLang, vLLM, an external URL).

A ``ServerKind`` is a kind of server to launch (the serving engine it runs, its command line, its readiness and
identity); the engine under test itself is ``harness.engine.Engine``, which the harness server runs.

* ``base``: ``ServerKind`` (installed? command line, where it listens, identity) and ``ServerSpec``;
* ``lifecycle``: one way to start any of them and wait until ready, and to stop them as a group;
* ``guard``: the process that makes sure no server outlives the job that started it;
* ``identity``: what a running server says it is (what a build *is* lives in ``harness.reuse``);
* ``registry``: ``get_server_kind(name)``.

Nothing is imported here: ``python -m harness.servers.guard`` must not import its own package's modules first.
"""
