"""The session hooks do what their specs say: a plugin chooses the evicted turns, scores turns
for masked eviction, and hears about saves and loads; a message over the context is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.hooks import hookimpl
from percache_plugin.session import MessageTooLong
from tests.helpers import baseline, tiny_pair

GEN = {"max_new_tokens": 3, "do_sample": False}


class NewestFirst:
    """Evicts the newest earlier turn instead of the oldest."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[int], int]] = []

    @hookimpl
    def percache_select_eviction(self, ctx: Any, session: Any, need: int) -> list[int]:
        self.calls.append(([t.turn_id for t in session.turns], need))
        return [session.turns[-1].turn_id]


class KeepTheFirst:
    """Scores the first turn as most relevant (masked eviction keeps it)."""

    @hookimpl
    def percache_turn_relevance(self, ctx: Any, session: Any, turn: Any, message: str) -> float:
        return 10.0 if turn.turn_id == 1 else 0.0


class Listener:
    def __init__(self) -> None:
        self.saved: list[tuple[str, int, int]] = []
        self.loaded: list[tuple[str, str, int]] = []

    @hookimpl
    def percache_session_saved(self, ctx: Any, session: Any, turn_id: int) -> None:
        self.saved.append((session.name, turn_id, session.saved_upto))

    @hookimpl
    def percache_session_loaded(self, ctx: Any, session: Any, source: str) -> None:
        self.loaded.append((session.name, source, len(session.turns)))


def test_a_plugin_chooses_the_evicted_turn_and_the_result_is_exact() -> None:
    model, tok = tiny_pair("llama")
    plugin = NewestFirst()
    pc = percache.enable(model, tok, plugins=[plugin], session_kv_tokens=120)
    for i in range(4):
        reply = pc.chat(f"Message number {i}.", **GEN)
    assert plugin.calls, "the budget was never exceeded"
    kept = [t.turn_id for t in pc.sessions.get("default").turns]
    assert 1 in kept  # the oldest stayed: the plugin's choice, not the default's
    with pc.disabled():
        assert reply.token_ids == baseline(model, reply.prompt_ids, 3)[0]


def test_turn_relevance_decides_what_masked_eviction_excludes() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, plugins=[KeepTheFirst()], session_kv_tokens=160,
                         session_eviction="masked", session_low_water=1.0)
    for i in range(5):
        pc.chat(f"Message number {i}.", **GEN)
    turns = pc.sessions.get("default").turns
    assert any(t.masked for t in turns)
    assert not turns[0].masked and turns[0].turn_id == 1


def test_saved_and_loaded_are_announced(tmp_path: Path) -> None:
    model, tok = tiny_pair("qwen2")
    listener = Listener()
    pc = percache.enable(model, tok, store=tmp_path, plugins=[listener])
    for msg in ("Hello.", "More?"):
        pc.chat(msg, **GEN)
    assert [s[:2] for s in listener.saved] == [("default", 1), ("default", 2)]
    assert listener.saved[1][2] > listener.saved[0][2] > 0
    pc.close()
    pc = percache.enable(model, tok, store=tmp_path, plugins=[listener])
    pc.chat("Again.", **GEN)
    assert listener.loaded == [("default", "snapshot", 2)]
    pc.close()
    for f in (tmp_path / "sessions").rglob("*.safetensors"):
        f.write_bytes(b"corrupt")
    pc = percache.enable(model, tok, store=tmp_path, plugins=[listener])
    pc.chat("Once more.", **GEN)
    assert listener.loaded[-1] == ("default", "ids", 3)
    pc.close()


def test_a_message_over_the_model_context_is_refused() -> None:
    model, tok = tiny_pair("llama", max_position_embeddings=64)
    pc = percache.enable(model, tok)
    with pytest.raises(MessageTooLong, match="model's context of 64 tokens"):
        pc.chat("y" * 80, max_new_tokens=4)
    assert pc.sessions.get("default").turns == []


def test_a_conversation_over_the_model_context_is_refused_naming_its_history() -> None:
    """Without session_kv_tokens the history grows; the turn that would run past the model's
    positions is refused (each turn alone fits), and no turn before it ran past them."""
    model, tok = tiny_pair("llama", max_position_embeddings=128)
    pc = percache.enable(model, tok)
    turns = 0
    with pytest.raises(MessageTooLong, match=r"history \d+ in \d+ turns.*model's context of 128 tokens.*"
                                             r"session_kv_tokens"):
        for _ in range(40):
            reply = pc.chat("More?", **GEN)
            assert len(reply.prompt_ids) + GEN["max_new_tokens"] <= 128
            turns += 1
    assert turns >= 2 and len(pc.sessions.get("default").turns) == turns
    pc.close()


def test_a_budget_keeps_a_long_conversation_within_the_model_context() -> None:
    model, tok = tiny_pair("llama", max_position_embeddings=128)
    pc = percache.enable(model, tok, session_kv_tokens=40)
    for _ in range(12):
        reply = pc.chat("More?", **GEN)
        assert len(reply.prompt_ids) + GEN["max_new_tokens"] <= 128
    assert reply.stats.turn_id == 12
    pc.close()


@pytest.mark.parametrize("mode", ["exact", "shifted", "masked"])
def test_a_budget_over_the_model_context_evicts_to_the_context(mode: str) -> None:
    """session_kv_tokens larger than the context: eviction keeps the turns within the context
    (a turn was refused, or ran past the positions, once the history outgrew it)."""
    model, tok = tiny_pair("llama", max_position_embeddings=128)
    pc = percache.enable(model, tok, session_kv_tokens=1000, session_eviction=mode)
    evicted, fallbacks = 0, set()
    for _ in range(16):
        reply = pc.chat("More?", **GEN)
        assert len(reply.prompt_ids) + GEN["max_new_tokens"] <= 128
        evicted += reply.stats.turns_evicted
        fallbacks.add(reply.stats.fallback)
    assert reply.stats.turn_id == 16 and evicted > 0
    # masked slots keep their positions: those turns leave exactly, said in stats.fallback
    assert any("fit the model's context" in f for f in fallbacks if f) == (mode == "masked")
    pc.close()
