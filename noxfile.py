"""nox sessions: the same commands locally, in CPU CI (.ci/run) and in the nightly GPU job."""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

PYTHON = "3.11"
# The CPU build of torch 2.13.0; a bare "torch" would pull a multi-GB CUDA build.
TORCH_PIN = os.environ.get("SWA_HARNESS_TORCH", "torch==2.13.0")


def _install(session: nox.Session, extras: str = "test") -> None:
    session.install(TORCH_PIN)
    session.install("-e", f".[{extras}]")


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit tests and scenario suites, in parallel; exit code 5 (nothing collected) fails the session."""
    _install(session, "test,eval")
    session.run("python", "-m", "pytest", "-n", "auto", "-p", "no:cacheprovider", *session.posargs)
