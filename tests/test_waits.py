"""The one knob that scales every bound a test waits under."""

from __future__ import annotations

import pytest

from tests.waits import SCALE_ENV, scaled


def test_bounds_scale_with_the_knob_and_a_bad_value_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SCALE_ENV, raising=False)
    assert scaled(120) == 120
    monkeypatch.setenv(SCALE_ENV, "2.5")
    assert scaled(120) == 300
    for bad in ("fast", "0", "-1"):
        monkeypatch.setenv(SCALE_ENV, bad)
        with pytest.raises(ValueError, match=SCALE_ENV):
            scaled(1)
