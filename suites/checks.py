"""Structural checks inside otherwise behavioural tests.

``expect_structure(cond, message)`` fails the test like ``assert`` does, with ``StructuralFailure``
(an ``AssertionError``), so the kill matrix can tell a wrong buffer layout or dtype from a wrong
computed output in the same test (``harness.faults.verdicts``).
"""

from __future__ import annotations


class StructuralFailure(AssertionError):
    """A design property was violated (a buffer's layout or dtype), not yet a computed output."""


def expect_structure(condition: object, message: str) -> None:
    if not condition:
        raise StructuralFailure(message)
