"""FINDINGS #10, vLLM's half, followed as upstream's report vllm-project/vllm#57610 (open): under vLLM's default sparse
prefix-cache retention a sliding-window group keeps only the blocks that end on a prompt's last aligned block, so the
first request that branches off the prompt inside that block gets no hit on any layer. The harness reads this as vLLM's
stated design (``CacheConfig.prefix_cache_retention_interval``: 0 keeps "only semantic checkpoints"), the same the
cache-hit protocol's ``MISSES_BY_DESIGN`` row ("vllm", "branch") holds, so it is no engine bug of
``harness/findings.py``; these tests say when a release changes it.

The scene is ``docs/repro/finding_10_vllm_branch_in_last_aligned_block_misses.py``'s (vLLM's KV-cache manager alone, no
model): held to what the same model's full-attention layers alone serve, a strict xfail on the pinned release naming
its miss (a pass means vLLM changed its retention: drop the xfail and say so in docs/FINDINGS.md #10), "still so" on
any other. The control applies the change upstream proposes (#57613: keep one more aligned block below each boundary a
later request can resume at) and passes, so the miss is the retention's, not the scene's."""

from __future__ import annotations

import pytest

from harness.findings import PINNED
from suites.findings.conftest import EXIT_BUG, installed, load_script, run_script
from suites.known_failures import known_failure

SCRIPT = "docs/repro/finding_10_vllm_branch_in_last_aligned_block_misses.py"
MISS = r"hit 0 tokens, where full attention alone hits 160: the sliding-window group kept only the blocks"


def _release() -> str:
    release = installed("vllm")
    if release is None:
        pytest.skip("vllm is not installed here")
    return release


def _verdict(release: str):
    script = load_script(SCRIPT)
    try:
        return script.reproduce()
    except script.SetupProblem as problem:
        if release == PINNED["vllm"]:
            raise
        pytest.skip(f"vllm {release}: {problem}")


def test_a_branch_inside_the_last_aligned_block_hits_what_full_attention_hits(request):
    release = _release()
    if release == PINNED["vllm"]:
        request.applymarker(
            known_failure(
                "docs/FINDINGS.md #10 (vLLM; upstream #57610, open): the default sparse retention keeps a sliding "
                "group's blocks only at a prompt's last aligned block",
                raises=AssertionError,
                match=MISS,
            )
        )
    verdict = _verdict(release)
    if verdict.bug_present and release != PINNED["vllm"]:
        pytest.xfail(f"still so in vllm {release}: {verdict.message}")
    assert not verdict.bug_present, verdict.message


def test_the_reproducer_passes_once_one_more_aligned_block_is_kept(monkeypatch):
    """The control: each reachable boundary's retained run widened by one aligned block below it (the change #57613
    proposes), written as a monkeypatch over the pinned release's ``reachable_block_mask``; the same scene then hits
    what full attention hits."""
    if _release() != PINNED["vllm"]:
        pytest.skip(f"the control's change is written against vllm {PINNED['vllm']}")
    from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager

    original = SlidingWindowManager.reachable_block_mask.__func__

    def one_block_lower(cls, *args, **kwargs):
        alignment = kwargs.get("alignment_tokens")
        boundaries = list(kwargs.get("reachable_boundaries", ()))
        if alignment and kwargs.get("retention_interval") is not None:
            lower = [b // alignment * alignment - alignment for b in boundaries]
            kwargs["reachable_boundaries"] = boundaries + [b for b in lower if b > 0]
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(SlidingWindowManager, "reachable_block_mask", classmethod(one_block_lower))
    verdict = load_script(SCRIPT).reproduce()
    assert not verdict.bug_present, f"with one more aligned block kept: {verdict.message}"


@pytest.mark.extended  # vLLM imported afresh in its own interpreter (about 60-90 s on 2 loaded cores)
def test_the_script_exits_1_on_the_pinned_release():
    """``python <script>`` as a maintainer would paste it into #57610: exit 1 on the pinned release, where the miss is
    measured; elsewhere 0 or 1 are both answers, 2 is NO VERDICT."""
    release = _release()
    run = run_script(SCRIPT)
    status = run.judged(SCRIPT)
    if release == PINNED["vllm"]:
        assert status == EXIT_BUG, f"{SCRIPT} exited {run.status} on vllm {release}: {run.said}"
