"""``seeded``: the same seed draws the same numbers, and the generators' state before the block
is theirs again after it; ``None`` draws from the generators as they are."""

from __future__ import annotations

import torch

from percache_plugin.decode.seeded import seeded


def test_a_seed_repeats_and_restores_the_state() -> None:
    torch.manual_seed(1)
    before = torch.get_rng_state()
    with seeded(7):
        a = torch.rand(4)
    assert torch.equal(torch.get_rng_state(), before)
    with seeded(7):
        b = torch.rand(4)
    assert torch.equal(a, b)
    with seeded(8):
        assert not torch.equal(torch.rand(4), a)


def test_no_seed_draws_from_the_process_state() -> None:
    torch.manual_seed(1)
    want = torch.rand(4)
    torch.manual_seed(1)
    with seeded(None):
        assert torch.equal(torch.rand(4), want)
