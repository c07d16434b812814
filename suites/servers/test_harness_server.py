"""The harness's own server held to the cache-hit protocol (``suites/servers/cache_hits.py``), as SGLang and vLLM are:
the shipped Gemma2 checkpoint (window 16), lm-eval's few-shot contexts, conversations and long prompts, 24 greedy
tokens with top-5 logprobs; every answer served from a warm prefix cache must equal the same request replayed after
``/flush_cache`` and transformers'. Graphs on (the tape) and off, a roomy pool, and pools small enough that the
tree evicts and tombstones while requests run, at page 1 and page 16."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.servers.base import ServerSpec
from harness.servers.harness_server import HarnessServer
from suites.conftest import TRAINED_CHECKPOINTS
from suites.servers.cache_hits import Expected, Workload, hold, lm_eval_workload, page_of, transformers_expectation
from suites.servers.oracles import running

KIND = HarnessServer()
SERVED = "swa-harness"
NEW_TOKENS = 24
CKPT = TRAINED_CHECKPOINTS["gemma2-tiny-swa"]
# fp32 on both sides; the engine's batched kernels against transformers' eager attention one prompt at a time
# (the same bound the SGLang and vLLM suites hold their servers to).
LOGPROB_TOL = 1e-4
# 18 reuse requests of 60 to 290 tokens at once: about 4,300 KV slots roomy. Tight: four requests at a time in 2,048
# full and 512 SWA slots, so requests wait for slots and the tree evicts full KV and tombstones SWA KV while others
# run (measured over one protocol run: 208 tokens' full KV evicted and 615 tokens' SWA KV given back at page 1; 176
# and 528 at page 16). The smallest pools the engine takes (1,024 full; 192 SWA at page 1, 448 at page 16) passed
# alone but not with the cores shared: arrivals then come later and 4 or 5 of 6 repeats found the warm-up evicted.
TIGHT = (
    "--max-running", "4", "--full-pool-size", "2048", "--swa-pool-size", "512", "--chunk-size", "64",
    "--max-prefill-tokens", "128",
)  # fmt: skip
BASE = ("--num-threads", "1")
ROOMY = ("--max-running", "8", "--full-pool-size", "16384", "--swa-pool-size", "8192")  # nothing evicted


@pytest.fixture(scope="module")
def workload() -> Workload:
    return lm_eval_workload().with_edges(CKPT)


@pytest.fixture(scope="module")
def reference(workload: Workload) -> Expected:
    return transformers_expectation(CKPT, workload, NEW_TOKENS)


def harness_server(flags: tuple[str, ...], graphs: str, log: Path):
    spec = ServerSpec(model=str(CKPT), served_name=SERVED, graphs=graphs, flags=(*BASE, *(flags or ROOMY)))
    return running(KIND, spec, log, timeout=300)


@pytest.mark.parametrize(
    "graphs,flags",
    [
        pytest.param("tape", (), id="tape-roomy"),
        pytest.param("off", (), id="eager-roomy"),
        pytest.param("tape", TIGHT, id="tape-tight"),
        pytest.param("tape", (*TIGHT, "--page-size", "16"), id="tape-tight-page16"),
    ],
)
def test_a_warm_prefix_cache_answers_as_a_fresh_one_and_transformers(
    graphs: str, flags: tuple[str, ...], workload: Workload, reference, tmp_path: Path
) -> None:
    pool = "tight" if flags else "roomy"  # tight: the protocol asks the server's counters for evictions
    with harness_server(flags, graphs, tmp_path / "server.log") as server:
        name = f"harness {graphs} {' '.join(flags) or 'roomy'}"
        hold(KIND, server, SERVED, workload, NEW_TOKENS, reference, LOGPROB_TOL, name, pool, page=page_of(flags))
