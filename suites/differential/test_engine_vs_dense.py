"""The engine (pool, chunked prefill, window eviction, graph replays) against the dense no-cache
reference, which recomputes every sequence from scratch with explicit masks.

Every SWA write and every window free is watched on the way (``swa_write_spy``, ``free_swa_watch``): a wrong write id
or a mapping left behind fails as the wrong state it is, at the step it happens, before the target's own checks or a
later double free can crash the run."""

from __future__ import annotations

import pytest
import torch

from fixtures.checkpoints import untied_checkpoint
from harness.engine.request import SamplingParams
from harness.model import reference_logits
from suites.conftest import ENGINE_LIMITS, TRAINED_CHECKPOINTS
from suites.differential.test_graph_vs_eager import TOLERANCE, phases
from suites.differential.test_overlap import SCHEDULES

pytestmark = pytest.mark.usefixtures("swa_write_spy", "free_swa_watch")


def engine_vs_dense(target, checkpoint, graphs: str = "tape", sequences=None, schedule: str = "sync") -> None:
    engine = target.make_engine(checkpoint, graphs=graphs, schedule=schedule, **ENGINE_LIMITS)
    sequences = sequences or phases(engine.model_config.vocab_size)[0]
    got = engine.teacher_forced_logits(sequences)
    dense = reference_logits(engine.model, [p + c for p, c in sequences])
    for i, ((prompt, cont), g, d) in enumerate(zip(sequences, got, dense)):
        expected = d[len(prompt) - 1 : len(prompt) - 1 + len(cont)]
        diff = (g - expected).abs().max().item()
        assert diff <= TOLERANCE, f"request {i}: engine vs dense reference logits differ by {diff:.3g}"


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("graphs", ["tape", "off"])
@pytest.mark.parametrize("arch", ["gemma2", "gemma3_text", "qwen3"])
def test_engine_matches_dense_reference_on_random_checkpoints(target, arch, graphs, schedule):
    engine_vs_dense(target, untied_checkpoint(arch), graphs, schedule=schedule)


@pytest.mark.parametrize("graphs", ["tape", "off"])
def test_engine_matches_dense_reference_when_extend_and_decode_batches_have_equal_token_counts(target, graphs):
    """Four one-token prompts: the prefill batch and every decode batch carry four tokens, so state kept
    from the extend path (a loc, an index buffer) fits the decode path's shapes and would be reused silently."""
    sequences = [([3 + i], [(7 * i + 5 * j) % 60 + 1 for j in range(12)]) for i in range(4)]
    engine_vs_dense(target, untied_checkpoint("gemma2"), graphs, sequences)


@pytest.mark.parametrize("name", sorted(TRAINED_CHECKPOINTS))
def test_engine_matches_dense_reference_on_the_trained_checkpoint(target, name):
    engine_vs_dense(target, TRAINED_CHECKPOINTS[name])


@pytest.mark.parametrize("graphs", ["tape", "off"])
def test_prompt_logprobs_match_the_dense_reference_across_chunks(target, graphs):
    """Echo scoring, what lm-eval's loglikelihood tasks read: every prompt token's logprob, scored chunk by chunk
    (``ENGINE_LIMITS``' chunks of 16: prompts of one, three and five chunks, two beside each other in one batch), is
    the dense reference's ``log P(token p | tokens < p)``; the first token has none."""
    engine = target.make_engine(untied_checkpoint("gemma2"), graphs=graphs, **ENGINE_LIMITS)
    vocab = engine.model_config.vocab_size
    prompts = [[(7 * i + 3 * j + j * j) % (vocab - 1) + 1 for j in range(n)] for i, n in enumerate((9, 40, 75))]
    reqs = [engine.add_request(p, SamplingParams(max_new_tokens=0), prompt_logprobs=1) for p in prompts]
    outs = {o.rid: o for o in engine.run_until_done()}
    dense = reference_logits(engine.model, prompts)
    for i, (req, prompt, logits) in enumerate(zip(reqs, prompts, dense)):
        got = outs[req.rid].prompt_logprobs
        assert got is not None and len(got) == len(prompt) and got[0] is None, f"request {i}: {got and len(got)}"
        want = torch.log_softmax(logits[:-1].double(), -1)[torch.arange(len(prompt) - 1), torch.tensor(prompt[1:])]
        worst = max(abs(g.logprob - w) for g, w in zip(got[1:], want.tolist()))
        assert worst <= TOLERANCE, f"request {i} ({len(prompt)} tokens): prompt logprobs differ by {worst:.3g}"
