"""Mutation runs over real engines' SWA memory code: every small change a mutation tool makes to SGLang's or vLLM's
installed source, each through only the tests that reach the function it changes.

* ``scope``: which files (and functions) of each engine are mutated, and why those.
* ``generate``: the mutants, made by cosmic-ray's operators (a chosen subset) over the installed source text.
* ``activate``: the pytest plugin that imports one mutated module in place of the installed one.
* ``survivors``: each survivor's class (equivalent, GPU-only, a suite gap) and the score.
* ``record``: the report (``reports/mutants-<target>.json``): per mutant its diff, status, killer or reason.

The runner (test impact on the clean build, then each mutant through its reaching tests) is a job:
``harness/jobs/mutants.py``, ``swa-harness mutants``.

This package's ``__init__`` imports nothing: ``-p harness.mutants.activate`` must load before any engine module.
"""
