"""One attention registration per process, dispatched by module to its handle."""

from __future__ import annotations

from transformers import AttentionInterface

import percache_plugin as percache
from percache_plugin.attention.backend import NAMES
from tests.helpers import SEGMENTS, tiny_pair


def _percache_names() -> set[str]:
    return {n for n in AttentionInterface() if n.startswith("percache")}


def test_many_handles_register_one_name_per_backend() -> None:
    handles = []
    for _ in range(3):
        model, tok = tiny_pair("llama")
        handles.append(percache.enable(model, tok))
    assert _percache_names() <= set(NAMES.values())
    outs = [pc.generate(SEGMENTS, max_new_tokens=2).stats.tokens_computed for pc in handles]
    assert len(set(outs)) == 1
    for pc in handles:
        pc.close()
    assert _percache_names() <= set(NAMES.values())


def test_two_handles_keep_their_own_hooks() -> None:
    seen: list[str] = []

    class Tag:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        @percache.hookimpl(wrapper=True)
        def percache_attention(self, ctx, module, query, key, value, attention_mask, kwargs):  # type: ignore[no-untyped-def]
            seen.append(self.tag)
            return (yield)

    (m1, t1), (m2, t2) = tiny_pair("llama"), tiny_pair("llama")
    a = percache.enable(m1, t1, plugins=[Tag("a")])
    b = percache.enable(m2, t2, plugins=[Tag("b")])
    a.generate(SEGMENTS, max_new_tokens=1)
    assert set(seen) == {"a"}
    seen.clear()
    a.close()
    b.generate(SEGMENTS, max_new_tokens=1)
    assert set(seen) == {"b"}
    b.close()
