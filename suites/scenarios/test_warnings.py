"""Invariant 6: a clean forward — eager or graph, extend or decode — logs no memo warning."""

from __future__ import annotations

import pytest

from fixtures.checkpoints import untied_checkpoint
from fixtures.scenarios.padding import mixed_batch_cases
from harness.engine import SamplingParams
from suites.conftest import ENGINE_LIMITS

pytestmark = pytest.mark.structural  # op counts / log lines: design properties, not outputs


@pytest.mark.parametrize("arch", ["gemma2", "gemma3_text", "qwen3"])
@pytest.mark.parametrize("graphs", ["tape", "off"])
def test_clean_forwards_log_no_stale_key_warning(target, arch, graphs, stale_key_watch):
    engine = target.make_engine(untied_checkpoint(arch), graphs=graphs, **ENGINE_LIMITS)
    for case in mixed_batch_cases(6):
        prompts = [[(13 * i + j) % 127 + 1 for j in range(n)] for i, n in enumerate(case.prompt_lens)]
        engine.generate(prompts, [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in case.new_tokens])
    assert not stale_key_watch.messages, (
        f"{len(stale_key_watch.messages)} warnings, first: {stale_key_watch.messages[0]}"
    )
