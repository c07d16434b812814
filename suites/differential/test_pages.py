"""The engine at page sizes 4 and 16 (every other suite runs page size 1) against the dense reference, with
every SWA write checked at page granularity.

At these sizes requests grow page by page: prefill chunks (10 tokens) end mid-page, decode crosses page
boundaries, the window (5-6 tokens) gives back whole pages only, long after its boundary passed
mid-page, and requests finish with their last page partly used. After every forward: no page of either
pool holds tokens of two requests and no token sits on the padding page, so each write (whose SWA slot
the write spy holds to the current mapping) lands on a page its request owns. At the end both pools are
idle again.
"""

from __future__ import annotations

import pytest
import torch

from fixtures.checkpoints import untied_checkpoint
from harness.engine import Engine
from harness.model import reference_logits
from suites.conftest import ENGINE_LIMITS
from suites.differential.test_graph_vs_eager import TOLERANCE, phases
from suites.differential.test_overlap import SCHEDULES
from suites.hooks import on_every_forward

PAGED_LIMITS = {**ENGINE_LIMITS, "chunk_size": 10, "max_prefill_tokens": 36}


def pages_owned_by_their_requests(engine: Engine):
    """An ``on_every_forward`` check: each page of either pool belongs to one running request."""
    sched, ps = engine.scheduler, engine.runner.allocator.page_size
    mapping = engine.runner.allocator.full_to_swa_index_mapping

    def check(batch, uses_graph, state) -> None:
        owner: dict[tuple[str, int], int] = {}
        for req in sched.running:
            full = engine.runner.req_to_token_pool.req_to_token[req.req_pool_idx, : req.slots_len].to(torch.int64)
            swa = mapping[full]
            for pool, slots in (("full", full), ("SWA", swa[swa > 0])):
                for page in set((slots // ps).tolist()):
                    assert page != 0, f"request {req.rid} holds a token on the {pool} pool's padding page"
                    first = owner.setdefault((pool, page), req.rid)
                    assert first == req.rid, f"{pool} page {page} holds tokens of requests {first} and {req.rid}"

    return check


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("graphs", ["tape", "off"])
@pytest.mark.parametrize("page_size", [4, 16])
@pytest.mark.parametrize("arch", ["gemma2", "gemma3_text"])
def test_paged_engine_matches_dense_reference(target, arch, page_size, graphs, schedule, swa_write_spy):
    engine = target.make_engine(
        untied_checkpoint(arch), graphs=graphs, page_size=page_size, schedule=schedule, **PAGED_LIMITS
    )
    on_every_forward(engine, after=pages_owned_by_their_requests(engine))
    sequences = phases(engine.model_config.vocab_size)[0]
    got = engine.teacher_forced_logits(sequences)
    dense = reference_logits(engine.model, [p + c for p, c in sequences])
    for i, ((prompt, cont), g, d) in enumerate(zip(sequences, got, dense)):
        diff = (g - d[len(prompt) - 1 : len(prompt) - 1 + len(cont)]).abs().max().item()
        assert diff <= TOLERANCE, (
            f"page size {page_size}, request {i}: engine vs dense reference logits differ by {diff:.3g}"
        )
    assert swa_write_spy, "no SWA write was checked: the spy is not wired"
    assert engine.pools_idle(), "a paged request did not give back every page"
