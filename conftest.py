"""Repo-wide pytest setup: hypothesis profiles shared by tests/ and suites/.

The default profile keeps the ordinary test session fast; ``--hypothesis-profile=exhaustive`` (or
``SWA_HARNESS_HYPOTHESIS=exhaustive``) runs the scenario generators much harder.
"""

from __future__ import annotations

import os

import torch
from hypothesis import HealthCheck, settings

# One intra-op thread per test process: the tensors here are tiny, and xdist already runs one
# worker per core. Two threads per worker oversubscribe the cores and run ~20x slower.
torch.set_num_threads(1)

settings.register_profile(
    "default",
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "exhaustive",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("SWA_HARNESS_HYPOTHESIS", "default"))
