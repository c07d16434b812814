"""Invariant 3: the SWA slot used for a token always equals the current mapping of its full slot —
checked at every Python-visible write (eager forwards, warm-up and capture) and, for graph replays,
on the write locations the replay consumed."""

from __future__ import annotations

import pytest
import torch

from fixtures.checkpoints import untied_checkpoint
from fixtures.scenarios.padding import mixed_batch_cases
from harness.engine import SamplingParams
from suites.conftest import ENGINE_LIMITS
from suites.hooks import on_every_forward


@pytest.mark.parametrize("graphs", ["tape", "off"])
@pytest.mark.parametrize("arch", ["gemma2", "qwen3"])
def test_every_swa_write_uses_the_current_mapping(target, arch, graphs, swa_write_spy):
    engine = target.make_engine(untied_checkpoint(arch), graphs=graphs, **ENGINE_LIMITS)
    mapping = engine.runner.allocator.full_to_swa_index_mapping

    def replayed_locs_are_current(batch, uses_graph, state):
        if uses_graph:
            used = engine.runner.graph_runner.buffers.inputs["out_cache_loc_swa"][: batch.batch_size]
            assert torch.equal(used, mapping[batch.out_cache_loc]), (
                f"graph replay wrote SWA slots {used.tolist()[:8]}, current mapping {mapping[batch.out_cache_loc].tolist()[:8]}"
            )

    on_every_forward(engine, after=replayed_locs_are_current)
    for case in mixed_batch_cases(6):
        prompts = [[(17 * i + j) % 127 + 1 for j in range(n)] for i, n in enumerate(case.prompt_lens)]
        engine.generate(prompts, [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in case.new_tokens])
    assert swa_write_spy, "no SWA write was checked: the spy is not wired"
