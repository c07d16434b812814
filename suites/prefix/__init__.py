"""Prefix-cache suites: the state machine of requests that share prefixes, on any target.

The machine lives in ``machines.py`` (not a test module); pytest rewrites only test modules' asserts, so it is asked
to rewrite that module's too, for the failure detail a kill reports.
"""

import pytest

pytest.register_assert_rewrite("suites.prefix.machines")
