"""The private transformers attributes percache reads still exist (fails loudly if renamed)."""

from __future__ import annotations

import pytest

from percache_plugin.attention import hf_private
from tests.helpers import tiny_pair


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_private_seams_hold(family: str) -> None:
    model, _ = tiny_pair(family)
    assert hf_private.check(model) == []
    assert isinstance(hf_private.attn_implementation(model), str)
    assert isinstance(hf_private.can_set_attn_implementation(model), bool)


def test_check_reports_a_renamed_attribute() -> None:
    class Renamed:
        config = object()

    problems = hf_private.check(Renamed())
    assert len(problems) == 3 and "config._attn_implementation" in problems[0]
