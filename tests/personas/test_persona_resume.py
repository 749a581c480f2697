"""A LoRA persona's turn leaves the handle keyed by the weights in use after it (the base
model's): sessions saved under those weights stay visible, and a session saved under the base
weights continues under a persona on a fresh handle, its history computed again under the
adapter (the same greedy tokens as plain generate under it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import percache_plugin as percache
from tests.personas.loras import generate_under, llama_with_loras


def _base_session(tmp_path: Path, name: str) -> tuple[Any, Any]:
    """A fresh handle on a store holding persona "pa" (adapter a) and session ``name``, saved
    under the base weights; and the reference model."""
    model, tok, dirs, reference = llama_with_loras(tmp_path)
    store = tmp_path / "store"
    pc = percache.enable(model, tok, store=store)
    pc.personas.add("pa", "You are a terse pirate.", adapter=dirs["a"])
    pc.sessions.create(name)
    pc.chat("Hello there.", session=name, max_new_tokens=4)
    pc.close()
    return percache.enable(model, tok, store=store), reference


def test_a_base_session_continues_under_a_persona_on_a_fresh_handle(tmp_path: Path) -> None:
    pc, reference = _base_session(tmp_path, "b")
    try:
        reply = pc.chat("Go on.", session="b", persona="pa", max_new_tokens=4)  # raised UnknownSession
        assert reply.turn_id == 2 and reply.stats.restored_from == "weights_changed"
        assert reply.token_ids == generate_under(reference, "a", reply.prompt_ids, 4)[0]
    finally:
        pc.close()


def test_sessions_of_the_base_weights_stay_visible_after_a_persona_turn(tmp_path: Path) -> None:
    pc, reference = _base_session(tmp_path, "a")
    try:
        pc.sessions.create("p")
        pc.chat("Ahoy.", session="p", persona="pa", max_new_tokens=4)
        assert "a" in pc.sessions.names()  # the store of the adapter's weights was asked
        reply = pc.chat("Go on.", session="a", max_new_tokens=4)
        assert reply.turn_id == 2 and reply.stats.restored_from == "snapshot"
        assert reply.token_ids == generate_under(reference, None, reply.prompt_ids, 4)[0]
    finally:
        pc.close()
