"""The built-in engine plugins: a replacement store takes every write."""

from __future__ import annotations

from typing import Any

import percache_plugin as percache
from tests.helpers import SEGMENTS, tiny_pair


class OtherStore:
    def __init__(self) -> None:
        self.keys: list[str] = []

    @percache.hookimpl
    def percache_store_chunk(self, ctx: Any, key: str, piece: Any, parent: Any, kv: Any,
                             exact: bool) -> bool:
        self.keys.append(key)
        return True


def test_replaced_store_receives_every_write_and_the_builtin_none() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    other = OtherStore()
    pc.plugins.register(other)
    gen = pc.generate(SEGMENTS, max_new_tokens=2)
    assert gen.stats.nodes_stored == len(other.keys) > 0
    assert pc.store.nodes() == [] and pc.store.total_bytes() == 0
    pc.plugins.unregister(other)
    pc.generate(SEGMENTS, max_new_tokens=2)
    assert pc.store.nodes()  # the built-in store again
    pc.close()


class Events:
    def __init__(self) -> None:
        self.log: list[str] = []

    @percache.hookimpl
    def percache_request_start(self, ctx: Any, prompt: Any) -> None:
        self.log.append("start")

    @percache.hookimpl
    def percache_request_end(self, ctx: Any, prompt: Any, stats: Any, generation: Any) -> None:
        self.log.append("end:" + ("gen" if generation is not None else "none"))


def test_request_start_and_end_fire_symmetrically() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    ev = Events()
    pc.plugins.register(ev)
    pc.generate(SEGMENTS, max_new_tokens=2)
    pc.prefill(SEGMENTS)
    with pc.disabled():
        pc.generate(SEGMENTS, max_new_tokens=2)  # no plugin: no events
    assert ev.log == ["start", "end:gen", "start", "end:none"]
    pc.close()
