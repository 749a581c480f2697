"""percache_mask_function: extra masks are ANDed into the model's own masks."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import percache_plugin as percache
from tests.helpers import tiny_pair


class ExcludeSlots:
    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end

    @percache.hookimpl
    def percache_mask_function(self, ctx: Any) -> Any:
        start, end = self.start, self.end
        return lambda b, h, q, kv: (kv < start) | (kv >= end)


class KeepAll:
    @percache.hookimpl
    def percache_mask_function(self, ctx: Any) -> Any:
        return lambda b, h, q, kv: kv >= 0


@pytest.mark.parametrize("family", ["llama", "mistral", "gemma2"])
def test_extra_mask_equals_an_explicit_4d_mask(family: str) -> None:
    # A window wider than the prompt, so one explicit causal mask serves every layer (gemma2
    # takes the eager mask path).
    extra = {} if family == "llama" else {"sliding_window": 64}
    model, tok = tiny_pair(family, **extra)
    ids = torch.tensor([list(range(10, 40))])
    n = ids.shape[1]
    with torch.inference_mode():
        plain = model(ids).logits
    pc = percache.enable(model, tok)
    with torch.inference_mode():
        pc.plugins.register(KeepAll())
        assert torch.equal(model(ids).logits, plain) or (model(ids).logits - plain).abs().max() <= 1e-5
        pc.plugins.register(ExcludeSlots(3, 9))
        masked = model(ids).logits
    pc.close()
    # The same exclusion as a 4D additive mask on the plain model; rows of the excluded span
    # differ (they cannot see themselves), so compare the others.
    q = torch.arange(n)[:, None]
    k = torch.arange(n)[None, :]
    allowed = (k <= q) & ((k < 3) | (k >= 9))
    bias = torch.zeros(n, n).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]
    with torch.inference_mode():
        want = model(ids, attention_mask=bias).logits
    rows = torch.cat([torch.arange(0, 3), torch.arange(9, n)])
    assert (masked[0, rows] - want[0, rows]).abs().max().item() <= 1e-4
    assert (masked[0, -1] - plain[0, -1]).abs().max().item() > 1e-4  # it did change something
