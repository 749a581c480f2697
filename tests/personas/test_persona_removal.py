"""Deleting a conversation held under a LoRA persona's weights, and removing a persona: no file
of the store keeps its text or its head snapshots, and a new handle serves neither."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import percache_plugin as percache
from tests.assistant.test_removal_traces import files_holding
from tests.personas.loras import generate_under, llama_with_loras

PROMPT = "You are Zorblax, keeper of locker 4417."
NEEDLES = [b"zorblax", b"4417"]


def _snapshots(store: Path) -> list[Path]:
    return sorted((store / "personas").rglob("*.safetensors"))


def pirate_session(tmp_path: Path, *, base_turn: bool = False) -> tuple[Any, Any, Path]:
    """A store at ``tmp_path/store`` whose session "pirate" is saved under persona a's LoRA
    weights only (with ``base_turn``, the default session has a turn under the base weights);
    the model, tokenizer and store, the handle closed."""
    model, tok, dirs, _ = llama_with_loras(tmp_path)
    store = tmp_path / "store"
    pc = percache.enable(model, tok, store=store)
    pc.personas.add("a", "You are a terse pirate.", adapter=dirs["a"])
    pc.sessions.create("pirate")
    pc.chat("Zorblax: my locker code is 4417.", session="pirate", persona="a", max_new_tokens=4)
    if base_turn:
        pc.chat("Hello there.", max_new_tokens=4)
    pc.close()
    return model, tok, store


def test_a_session_saved_under_a_personas_weights_only_is_deleted_without_the_persona(tmp_path: Path) -> None:
    model, tok, store = pirate_session(tmp_path)
    pc = percache.enable(model, tok, store=store)
    assert "pirate" in {i.name for i in pc.sessions.list()}  # saved under a's weights only
    pc.sessions.delete("pirate")  # no persona given: it is not loaded under the weights in use
    assert files_holding(store, NEEDLES) == []
    assert not list((store / "sessions").rglob("*.safetensors"))
    assert "pirate" not in {i.name for i in pc.sessions.list()}
    pc.close()
    pc = percache.enable(model, tok, store=store)
    pc.sessions.create("pirate")
    assert pc.chat("Go on.", session="pirate", persona="a", max_new_tokens=4).turn_id == 1
    pc.close()


def test_a_removed_persona_leaves_no_prompt_or_head_snapshot(tmp_path: Path) -> None:
    model, tok, dirs, _ = llama_with_loras(tmp_path)
    store = tmp_path / "store"
    pc = percache.enable(model, tok, store=store)
    pc.personas.add("z", PROMPT, adapter=dirs["a"])
    pc.personas.add("same", PROMPT)  # the same head under other weights (no adapter)
    pc.personas.add("b", "You are a polite librarian.", adapter=dirs["b"])
    for name in ("z", "same", "b"):
        pc.sessions.create(name)
        pc.chat("Hello.", session=name, persona=name, max_new_tokens=4)
    assert len(_snapshots(store)) == 3  # one head per fingerprint and prompt
    pc.sessions.delete("z")  # the sessions keep a persona's prompt as their system prompt
    pc.sessions.delete("same")
    pc.personas.remove("z")
    assert len(_snapshots(store)) == 3  # "same" has this head still (under the base weights too)
    pc.personas.remove("same")
    assert len(_snapshots(store)) == 1  # b's only
    assert files_holding(store, NEEDLES) == []  # the handle still open
    pc.close()
    assert files_holding(store, NEEDLES) == []
    pc = percache.enable(model, tok, store=store)
    pc.personas.add("z", PROMPT, adapter=dirs["a"])
    pc.sessions.create("again")
    assert pc.chat("Hello.", session="again", persona="z", max_new_tokens=4).stats.persona_head == "stored"
    pc.close()


def test_a_persona_added_again_with_another_adapter_runs_the_new_one(tmp_path: Path) -> None:
    """The removed persona's adapter leaves the model: its name would shadow the new adapter."""
    model, tok, dirs, reference = llama_with_loras(tmp_path)
    pc = percache.enable(model, tok, store=tmp_path / "store")
    pc.personas.add("z", PROMPT, adapter=dirs["a"])
    pc.sessions.create("one")
    first = pc.chat("Hello.", session="one", persona="z", max_new_tokens=6)
    assert first.token_ids == generate_under(reference, "a", first.prompt_ids, 6)[0]
    pc.personas.remove("z")
    pc.personas.add("z", PROMPT, adapter=dirs["b"])
    pc.sessions.create("two")
    again = pc.chat("Hello.", session="two", persona="z", max_new_tokens=6)
    assert again.prompt_ids == first.prompt_ids
    assert again.token_ids == generate_under(reference, "b", again.prompt_ids, 6)[0] != first.token_ids
    plain = pc.chat("Hello.", max_new_tokens=6)  # no persona: the base model, as before
    assert plain.token_ids == generate_under(reference, None, plain.prompt_ids, 6)[0]
    pc.close()
