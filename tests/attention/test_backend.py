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


def test_a_second_handle_on_one_model_is_refused_until_the_first_closes() -> None:
    """One model, one open handle: a second one took over the modules' relay and mask provider,
    so the first one's splices ran without their mask (a RuntimeError in attention, or a wrong
    mask) and closing either left the other broken."""
    import gc

    import pytest

    model, tok = tiny_pair("llama")
    first = percache.enable(model, tok)
    with pytest.raises(RuntimeError, match="already has an open percache handle.*close"):
        percache.enable(model, tok)
    g = first.generate(SEGMENTS, max_new_tokens=2)  # the refused enable changed nothing
    assert g.stats.tokens_computed > 0 and first.enabled
    first.close()
    second = percache.enable(model, tok)  # closed: free again
    del second
    gc.collect()
    percache.enable(model, tok).close()  # dropped without close(): free once collected
