"""Engines: what serves an arm of an accuracy job (the harness server, SGLang, vLLM, an external URL).

* ``base``: ``Engine`` (installed? command line, where it listens, identity) and ``ServerSpec``;
* ``lifecycle``: one way to start any of them and wait until ready, and to stop them as a group;
* ``guard``: the process that makes sure no server outlives the job that started it;
* ``identity``: what a running server says it is;
* ``registry``: ``get_engine(name)``.

Nothing is imported here: ``python -m harness.engines.guard`` must not import its own package's modules first.
"""
