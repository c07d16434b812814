"""Speculative decoding in the engine: verifies of width 2-4 (a request's last token and its prompt-lookup
drafts, every position's logits, run through the extend path and its piecewise graphs) against the dense
reference, with drafts both accepted and rejected, on the target's memory code.

The continuations repeat stretches of their prompts with a few tokens changed, so lookups propose drafts
that the forced tokens accept for a while and then reject. A rejected draft's KV was written; its slots
go back to the pool, and the next verify writes there again. Checked: every logit row of every emitted
token equals the dense reference's, every SWA write uses the current mapping (the write spy), drafts were
both accepted and rejected, greedy generation emits what the engine without drafts emits, and both
pools are idle at the end.
"""

from __future__ import annotations

import pytest
import torch

from fixtures.checkpoints import untied_checkpoint
from harness.engine import SamplingParams
from harness.model import reference_logits
from suites.conftest import ENGINE_LIMITS
from suites.differential.test_graph_vs_eager import TOLERANCE

SPEC_LIMITS = {**ENGINE_LIMITS, "max_running_requests": 8}


def repeating(vocab: int, n: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """(prompt, continuation) pairs whose continuations quote their prompts, with edits."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        base = torch.randint(1, vocab, (10 + i % 5,), generator=g).tolist()
        noise = torch.randint(1, vocab, (8,), generator=g).tolist()
        prompt = base + noise[:3] + base[:4]
        continuation = base[4:9] + noise[3:5] + base[:6] + noise[5:] + base[2:5]
        out.append((prompt, continuation))
    return out


@pytest.mark.parametrize("graphs", ["tape", "off"])
@pytest.mark.parametrize("width", [2, 4])
@pytest.mark.parametrize("arch", ["gemma2", "gemma3_text"])
def test_verified_drafts_match_the_dense_reference(target, arch, width, graphs, swa_write_spy):
    engine = target.make_engine(untied_checkpoint(arch), graphs=graphs, speculative_tokens=width - 1, **SPEC_LIMITS)
    sequences = repeating(engine.model_config.vocab_size, 12)
    got = engine.teacher_forced_logits(sequences)
    dense = reference_logits(engine.model, [p + c for p, c in sequences])
    for i, ((prompt, cont), g, d) in enumerate(zip(sequences, got, dense)):
        diff = (g - d[len(prompt) - 1 : len(prompt) - 1 + len(cont)]).abs().max().item()
        assert diff <= TOLERANCE, f"request {i}: speculative engine vs dense reference logits differ by {diff:.3g}"
    stats = engine.spec_stats
    assert 0 < stats["accepted"] < stats["drafts"], f"drafts were not both accepted and rejected: {stats}"
    assert swa_write_spy, "no SWA write was checked: the spy is not wired"
    assert engine.pools_idle(), "a rejected draft's slots were not given back"


@pytest.mark.parametrize("arch", ["gemma2", "qwen3"])
def test_speculative_greedy_generation_equals_plain(target, arch):
    checkpoint = untied_checkpoint(arch)
    plain = target.make_engine(checkpoint, graphs="tape", **SPEC_LIMITS)
    spec = target.make_engine(checkpoint, graphs="tape", speculative_tokens=3, **SPEC_LIMITS)
    prompts = [p for p, _ in repeating(plain.model_config.vocab_size, 10, seed=1)]
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    want = [o.output_ids for o in plain.generate(prompts, params)]
    got = [o.output_ids for o in spec.generate(prompts, params)]
    assert got == want, "speculative decoding changed a greedy continuation"
    assert spec.spec_stats["verifies"] and spec.pools_idle()
