"""nox sessions: the same commands locally, in CPU CI (.ci/run) and in the nightly GPU job."""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "faults"]

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


@nox.session(python=PYTHON)
def scenarios(session: nox.Session) -> None:
    """Only the scenario and differential suites (pass --hypothesis exhaustive via SWA_HARNESS_HYPOTHESIS)."""
    _install(session)
    session.run("python", "-m", "pytest", "-n", "auto", "-p", "no:cacheprovider", "suites/scenarios", "suites/differential",
                *session.posargs)


@nox.session(python=PYTHON)
def faults(session: nox.Session) -> None:
    """The kill matrix: the clean build, then every catalog fault, through the suites; writes reports/kill-matrix.json."""
    _install(session)
    session.run("swa-harness", "faults", *session.posargs)


@nox.session(python=PYTHON)
def accuracy(session: nox.Session) -> None:
    """The main job: GSM-style and AIME-style suites with graphs on and off on the shipped checkpoint
    (CPU by default), paired comparison, HTML report at reports/latest/index.html."""
    _install(session, "test,eval")
    session.run("swa-harness", "eval", *session.posargs)


@nox.session(python=PYTHON)
def report(session: nox.Session) -> None:
    """Re-render reports/latest/index.html from the saved runs (and the latest kill matrix)."""
    _install(session, "test,eval")
    session.run("swa-harness", "report", *session.posargs)
