"""A memory fact's K/V is placed by the row it was read with, never by a row read before it.

The fact's store key holds no position (one fact, one key), so another handle or process may
replace the row between the splice's look at it and the load of its tensors (an eviction, then
a session elsewhere storing the fact at its own position). The K/V read then was computed at the
new row's position: taking the old row's position (and its "exact" context) would splice it
unshifted, reported exact, into the wrong place."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.kv.store import ChunkKV, NodeInfo
from percache_plugin.session.memory_region import fact_kv_key
from tests.helpers import tiny_pair

FACTS = ["Ana drinks Quillberry tea every morning", "Ana keeps a Quillberry plant on her desk"]
ASK = "What Quillberry things does Ana have?"


class ReplaceRowOnLoad:
    """Around every load: a key in ``rows`` is deleted and stored again with the row and tensors
    given there, as another handle would between the caller's look at the row and this load."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[ChunkKV, NodeInfo]] = {}
        self.replaced = 0

    @percache.hookimpl(wrapper=True)
    def percache_load_chunk(self, ctx: Any, key: str, token_ids: tuple[int, ...]) -> Any:
        if key in self.rows:
            kv, info = self.rows.pop(key)
            ctx.store.delete(key)
            assert ctx.store.put(key, kv, parent=None, start=info.start, token_ids=token_ids, extra=info.extra)
            self.replaced += 1
        return (yield)


def _rows(pc: Any, name: str) -> dict[str, tuple[ChunkKV, NodeInfo]]:
    """The stored K/V and row of session ``name``'s region facts."""
    store, out = pc.engine.store, {}
    for fact in pc.sessions.get(name).memory:
        key = fact_kv_key(pc.engine.fingerprint, fact)
        kv, info = store.get(key), store.info(key)
        assert kv is not None and info is not None
        out[key] = (kv, info)
    return out


class RowlessLoader:
    """A loader that does not say which row it read (``ChunkKV.row`` None)."""

    @percache.hookimpl(tryfirst=True)
    def percache_load_chunk(self, ctx: Any, key: str, token_ids: tuple[int, ...]) -> ChunkKV | None:
        kv = ctx.store.get(key, token_ids=token_ids)
        return None if kv is None else replace(kv, row=None)


@pytest.mark.parametrize("loader", ["store", "ram", "rowless"])
def test_a_row_replaced_between_its_info_and_its_load_is_placed_by_the_new_row(loader: str) -> None:
    model, tok = tiny_pair("llama")
    swap = ReplaceRowOnLoad()
    plugins: list[Any] = [swap, RowlessLoader()] if loader == "rowless" else [swap]
    pc = percache.enable(model, tok, embedder="hash", predict="off", memory_recall=True, memory_threshold=0.0,
                         session_blocks=False, memory_recall_mode="splice",
                         ram_cache_bytes=1 << 24 if loader == "ram" else 0, plugins=plugins)
    for fact in FACTS:
        pc.memory.add(fact, scope="ana")
    pc.sessions.create("far", system="You are a very patient assistant; answer in full sentences.")
    pc.chat(ASK, session="far", memory_scope="ana", max_new_tokens=2)
    far = _rows(pc, "far")  # the facts' K/V at the far session's positions
    for key in far:
        pc.engine.store.delete(key)
    pc.sessions.create("a", system="Be brief.")
    assert pc.chat(ASK, session="a", memory_scope="ana", max_new_tokens=2).stats.memory_facts_stored == len(FACTS)
    near = _rows(pc, "a")
    assert all(near[k][1].start != far[k][1].start for k in far)

    swap.rows = far  # the next load of each fact finds the far row in place of the near one
    pc.sessions.create("b", system="Be brief.")
    s = pc.chat(ASK, session="b", memory_scope="ana", max_new_tokens=2).stats
    assert swap.replaced == len(FACTS)
    n_facts = sum(len(f.ids) for f in pc.sessions.get("b").memory)
    if loader == "rowless":  # the row changed across the load: the facts are computed, exactly
        assert not s.approximate and s.memory_spliced_tokens == 0
        pc.disable()
        return
    # the far K/V is shifted to the near position, and said to be approximate
    assert s.approximate and s.memory_spliced_tokens == n_facts - len(FACTS) * 4
    assert s.memory_shifted_tokens == s.memory_spliced_tokens > 0
    pc.disable()
