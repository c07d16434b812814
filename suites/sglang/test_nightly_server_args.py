"""Every arm of the nightly plan parses with SGLang's own server parser and sets what it claims.

``ServerArgs.add_cli_args`` + ``ServerArgs.from_cli_args`` (what ``sglang.launch_server`` runs before
resolution) over each (model, arm) of the default plan, on CPU with the SGLang target's install
(``nox -s sglang``). An unknown flag, a bad choice or value, a deprecated spelling, or a flag that does
not set the ``ServerArgs`` field the arm names fails; the negative cases show that this test would.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.servers.sglang_server import GRAPHS_OFF_FLAGS, sglang_args
from harness.jobs.nightly import build_nightly_plan

PLAN = build_nightly_plan()


@pytest.fixture(scope="module")
def parser(target):
    if target.name != "sglang":
        pytest.skip("parses with real SGLang's ServerArgs: run with --target sglang (nox -s sglang)")
    from harness.servers.sglang_server import sglang_parser

    return sglang_parser()


def _assert_arm_parses(run, parser):
    from harness.servers.sglang_server import check_arm

    parsed = check_arm(sglang_args(run.spec), run.arm.expect, parser)
    assert parsed.field("model_path") == run.model.name and parsed.field("port") == run.port
    return parsed


@pytest.mark.parametrize("run", PLAN.runs, ids=[f"{r.model.slug}-{r.arm.name}" for r in PLAN.runs])
def test_arm_flags_parse_with_sglang(parser, run):
    parsed = _assert_arm_parses(run, parser)
    graphs_off = run.arm.name == "off"
    assert (parsed.field("cuda_graph_backend_decode") == "disabled") == graphs_off
    assert (parsed.field("cuda_graph_backend_prefill") == "disabled") == graphs_off
    assert parsed.field("disable_cuda_graph_padding") == (run.arm.name == "no-graph-padding")
    assert (parsed.field("swa_full_tokens_ratio") == 0.1) == (run.arm.name == "swa-ratio-0.1")
    assert parsed.deprecated == ()


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--cuda-graph-backend-decode", "off"), "invalid choice"),  # 0.5.23's choices: full, breakable, disabled
        (("--disable-cuda-graphs",), "unrecognized arguments"),
        (("--swa-full-tokens-ratio", "a tenth"), "invalid float value"),
        (("--disable-cuda-graph",), "deprecated"),  # still parses in 0.5.23, with a warning: refused here
    ],
)
def test_an_invalid_arm_fails_the_test(parser, flags, message):
    from harness.servers.sglang_server import InvalidServerArgs

    on = PLAN.run_for(PLAN.models[0], "on")
    bad = replace(on, arm=replace(on.arm, flags=flags))
    with pytest.raises(InvalidServerArgs, match=message):
        _assert_arm_parses(bad, parser)


def test_flags_that_do_not_set_the_claimed_field_fail(parser):
    from harness.servers.sglang_server import InvalidServerArgs

    off = PLAN.run_for(PLAN.models[0], "off")
    # decode disabled, prefill left as is: the graph mode's flags, half of them, as the arm's own flags
    half = replace(off, arm=replace(off.arm, graphs="on", flags=GRAPHS_OFF_FLAGS[:2]))
    with pytest.raises(InvalidServerArgs, match="cuda_graph_backend_prefill"):
        _assert_arm_parses(half, parser)


def test_check_plan_asks_the_sglang_kind_which_parses_the_same(parser):
    """``check_plan`` asks each launched arm's kind (``SGLangServer.refused_flags``): every nightly arm passes, and a
    flag SGLang refuses comes back as one line saying why."""
    kinds = {r.arm.kind.name for r in PLAN.runs if r.launched}
    assert kinds == {"sglang"}
    assert [r.arm.name for r in PLAN.runs if r.launched and r.arm.kind.refused_flags(r.spec, r.arm.expect)] == []
    on = PLAN.run_for(PLAN.models[0], "on")
    bad = replace(on, arm=replace(on.arm, flags=("--disable-cuda-graphs",)))
    refused = bad.arm.kind.refused_flags(bad.spec, bad.arm.expect)
    assert refused is not None and "unrecognized arguments" in refused and "\n" not in refused
