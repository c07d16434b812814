"""Unit tests of the harness's own code (``harness/``: its engine, memory pools, graphs, evals, jobs, reports,
servers, CLI), run against the harness alone. Scenario, differential and fault-killing suites that run
against any target belong in ``suites/``, not here. A test here may reuse a suite's machinery (a state machine,
a model of a request), but imports it from a non-test module of ``suites/`` (``suites/pool/machines.py``,
``suites/prefix/machines.py``), never from a ``test_*`` module, so that pytest never collects the same test
twice and a suite can be edited without breaking a unit test's imports.
"""
