"""Repo-wide pytest setup, shared by tests/ and suites/.

* Hypothesis profiles: the default keeps the ordinary session fast (and derandomized);
  ``SWA_HARNESS_HYPOTHESIS=exhaustive`` runs the scenario generators much harder; ``matrix`` (used
  by the kill matrix) does not shrink failing examples; ``seeded`` draws from ``--hypothesis-seed``.
* ``SWA_HARNESS_FAULT=<id>`` switches one catalog fault on for the whole run (the kill matrix
  runs the suites once per fault this way).
* One torch intra-op thread per test process.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, Phase, settings

from harness.env import HYPOTHESIS_ENV

# The tensors here are tiny and xdist already runs one worker per core: two threads per worker
# oversubscribe the cores and run ~20x slower.
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
# False-alarm runs (bench/false_alarms.py): the default sizes, but examples drawn from --hypothesis-seed.
settings.register_profile(
    "seeded",
    max_examples=40,
    deadline=None,
    derandomize=False,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
# The kill matrix: a failing example is the verdict, so skip shrinking (slow on engine-level cases).
settings.register_profile(
    "matrix",
    max_examples=40,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)
# The release matrices: the default profile's draws (its phases, the targeted one included, so the same examples as
# a plain run), but a failing example is the verdict: no shrinking.
settings.register_profile(
    "release-matrix",
    max_examples=40,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get(HYPOTHESIS_ENV, "default"))

_FAULT_KEY = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    from harness.faults import activate_from_env

    fault = activate_from_env()
    if fault is not None:
        config.stash[_FAULT_KEY] = fault.id


def pytest_report_header(config: pytest.Config) -> str | None:
    fault = config.stash.get(_FAULT_KEY, None)
    return f"swa-harness: fault {fault!r} injected" if fault else None


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """Under xdist (a worker per core) a test that raised torch's threads would oversubscribe the cores for every test
    its worker runs after it: put one thread back, and say which test did it."""
    if os.environ.get("PYTEST_XDIST_WORKER") and (threads := torch.get_num_threads()) != 1:
        torch.set_num_threads(1)
        item.warn(pytest.PytestWarning(f"left torch with {threads} intra-op threads (reset to 1 after it)"))
