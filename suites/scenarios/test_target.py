"""The suites test what they claim to: engines and pools built through the target run on its memory code."""

from __future__ import annotations

from fixtures.checkpoints import untied_checkpoint
from harness.targets.target import PoolSpec
from suites.conftest import ENGINE_LIMITS


def test_pools_and_engines_come_from_the_target(target):
    assert isinstance(target.build_pool(PoolSpec()).pool, target.pool_class)
    engine = target.make_engine(untied_checkpoint("gemma2"), graphs="off", **ENGINE_LIMITS)
    assert isinstance(engine.runner.pool, target.pool_class)
    assert engine.generate([[1, 2, 3]])[0].output_ids, "the engine over the target's pool generated nothing"
    assert engine.pools_idle()
