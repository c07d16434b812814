"""What the SGLang suites that drive SGLang's own cache objects share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def sglang_target():
    """The SGLang target (its pools, allocator and caches), or a skip naming why SGLang does not import here."""
    from harness.targets.sglang.imports import SGLangUnavailable

    try:
        from harness.targets.sglang import SGLangTarget

        return SGLangTarget()
    except SGLangUnavailable as unavailable:
        pytest.skip(f"SGLang is not importable here: {unavailable}")
