"""Every bound a test waits under, scaled by one knob for a loaded machine.

``SWA_HARNESS_TEST_TIMEOUT_SCALE=3 nox -s tests`` triples them all. The waits themselves are on events (a ready
line, a port that answers, a process state); the bound only decides when to give up and say what never came.
"""

from __future__ import annotations

import os

SCALE_ENV = "SWA_HARNESS_TEST_TIMEOUT_SCALE"


def scaled(seconds: float) -> float:
    """``seconds`` times the scale (default 1; a bad value is an error, not a silent 1)."""
    raw = os.environ.get(SCALE_ENV, "1")
    try:
        scale = float(raw)
    except ValueError:
        raise ValueError(f"{SCALE_ENV} must be a number, got {raw!r}") from None
    if not scale > 0:
        raise ValueError(f"{SCALE_ENV} must be > 0, got {raw!r}")
    return seconds * scale


SERVER_START_S = 300.0  # a server's start on an idle 2-core machine takes 5-40 s: generous, then scaled
