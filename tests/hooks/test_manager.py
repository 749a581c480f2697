"""Entry-point autoload and its switch."""

from __future__ import annotations

import importlib.metadata as md
from typing import Any

import pytest
import torch

import percache_plugin as percache
from percache_plugin.hooks import manager
from tests.helpers import SEGMENTS, tiny_pair


class _EP:
    name = "fake"
    group = manager.ENTRY_POINT_GROUP
    value = "fake:Plugin"

    class _Plugin:
        pass

    def load(self) -> Any:
        return self._Plugin()


class _Dist:
    entry_points = (_EP(),)
    metadata = {"name": "fake-dist"}


@pytest.fixture
def fake_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(md, "distributions", lambda: [_Dist()])


def test_entry_points_load_unless_disabled(fake_entry_point: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(manager.AUTOLOAD_ENV, raising=False)
    pm = manager.make_plugin_manager()
    assert "fake" in [n for n, _ in pm.list_name_plugin()]

    monkeypatch.setenv(manager.AUTOLOAD_ENV, "1")
    pm = manager.make_plugin_manager()
    assert "fake" not in [n for n, _ in pm.list_name_plugin()]


class _SumsLoadedKeys:
    """A wrapper of ``percache_load_chunk`` written before ``layered`` existed: it reads the
    tensors of what it wraps."""

    def __init__(self) -> None:
        self.seen: list[tuple[bool, float]] = []

    @percache.hookimpl(wrapper=True)
    def percache_load_chunk(self, ctx: Any, key: str, token_ids: tuple[int, ...]) -> Any:
        chunk = yield
        if chunk is not None:
            self.seen.append((chunk.pending is not None, float(chunk.keys[-1].sum())))
        return chunk


class _DeclaresLayered(_SumsLoadedKeys):
    @percache.hookimpl(wrapper=True)
    def percache_load_chunk(self, ctx: Any, key: str, token_ids: tuple[int, ...], layered: bool) -> Any:
        chunk = yield
        if chunk is not None:
            self.seen.append((chunk.pending is not None, 0.0))
        return chunk


def test_a_wrapper_without_layered_sees_whole_chunks(tmp_path: Any) -> None:
    """A load wrapper that does not declare ``layered`` is never handed a chunk still being read
    (it would sum memory not yet filled); one that declares it keeps the overlapped reads."""
    model, tok = tiny_pair("llama")
    gen = {"max_new_tokens": 2, "do_sample": False}
    pc = percache.enable(model, tok, store=tmp_path, ram_cache_bytes=0)
    pc.generate(SEGMENTS, **gen)  # stores every node
    whole = pc.generate(SEGMENTS, **gen)  # reuses them, read by the default loader
    pc.close()
    old = _SumsLoadedKeys()
    with percache.enable(model, tok, store=tmp_path, ram_cache_bytes=0, plugins=[old]) as pc:
        got = pc.generate(SEGMENTS, **gen)
    assert got.stats.nodes_reused > 0 and len(old.seen) == got.stats.nodes_reused
    assert not any(pending for pending, _ in old.seen)
    assert torch.equal(got.first_logits, whole.first_logits)
    new = _DeclaresLayered()
    with percache.enable(model, tok, store=tmp_path, ram_cache_bytes=0, plugins=[new]) as pc:
        pc.generate(SEGMENTS, **gen)
    assert new.seen and all(pending for pending, _ in new.seen)
