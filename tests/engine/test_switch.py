"""The attention switch: relayed into the hooks while enabled, lifted by disabled(), gone after close()."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import percache_plugin as percache
from tests.helpers import tiny_pair


class Count:
    def __init__(self) -> None:
        self.calls = 0

    @percache.hookimpl(wrapper=True)
    def percache_attention(self, ctx: Any, module: Any, query: Any, key: Any, value: Any,
                           attention_mask: Any, kwargs: Any) -> Any:
        self.calls += 1
        return (yield)


def test_relay_only_while_enabled_and_nested_disable_refused() -> None:
    model, tok = tiny_pair("llama")
    x = torch.tensor([[5, 6, 7, 8]])
    pc = percache.enable(model, tok)
    count = Count()
    pc.plugins.register(count)
    with torch.inference_mode():
        model(x)
        layers = count.calls
        assert layers == model.config.num_hidden_layers
        with pc.disabled():
            assert not pc.engine.enabled
            model(x)
            assert count.calls == layers  # the model's own attention
            with pytest.raises(RuntimeError, match="already disabled"), pc.disabled():
                pass
        assert pc.engine.enabled
        model(x)
        assert count.calls == 2 * layers
        pc.close()
        model(x)
    assert count.calls == 2 * layers
    with pytest.raises(RuntimeError, match="closed"), pc.disabled():
        pass
