"""Pool and allocator suites: random mutation sequences against a model of ownership, on any target.

The state machines live in ``machines.py`` (not a test module, so ``tests/`` can import them too); pytest
rewrites only test modules' asserts, so it is asked to rewrite that module's as well, for the same failure
detail the machines gave when they were defined in the test modules.
"""

import pytest

pytest.register_assert_rewrite("suites.pool.machines")
