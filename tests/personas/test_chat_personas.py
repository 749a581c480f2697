"""Persona turns on a tiny Llama with real peft LoRA adapters: every turn's greedy output equals
plain generate under the persona's adapter over the same ids; the head comes from its snapshot;
K/V computed under one adapter is never served under another."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.fingerprint import adapter_state, tuner_layers
from tests.personas.loras import generate_under, llama_with_loras

PROMPTS = {"a": "You are a terse pirate.", "b": "You are a polite librarian.", "plain": "You are plain."}
ADAPTERS = {"a": "a", "b": "b", "plain": None}
MESSAGES = ["Hello there.", "What is on Friday?", "And Monday?"]


def _check(reply: Any, reference: Any, adapter: str | None, n: int = 4) -> None:
    want, want_logits = generate_under(reference, adapter, reply.prompt_ids, n)
    assert reply.token_ids == want
    assert reply.first_logits is not None
    assert float((reply.first_logits - want_logits).abs().max()) <= 1e-4


def test_alternating_personas_equal_generate_under_their_adapter(tmp_path: Path) -> None:
    model, tok, dirs, reference = llama_with_loras(tmp_path)
    pc = percache.enable(model, tok, store=tmp_path / "store")
    for name in ("a", "b"):
        pc.personas.add(name, PROMPTS[name], adapter=dirs[name])
    pc.personas.add("plain", PROMPTS["plain"])
    assert [p.name for p in pc.personas.list()] == ["a", "b", "plain"]
    state = adapter_state(tuner_layers(model))
    ids = pc.sessions.layout.head(PROMPTS["a"])[0] + pc.sessions.layout.turn("Hi.", None)
    outputs = {name: generate_under(reference, ADAPTERS[name], ids, 6)[0] for name in PROMPTS}
    assert len({tuple(o) for o in outputs.values()}) == 3  # the adapters change what is generated
    for name in PROMPTS:
        pc.sessions.create(name)
    for round_ in range(3):
        for name in PROMPTS:
            reply = pc.chat(MESSAGES[round_], session=name, persona=name, max_new_tokens=4)
            _check(reply, reference, ADAPTERS[name])
            assert reply.stats.persona == name
            assert reply.stats.persona_head == ("stored" if round_ == 0 else "session")
            assert adapter_state(tuner_layers(model)) == state  # the model is as it was
            rec = pc.turn_log.get(reply.turn_id, name)
            assert rec.persona == name and rec.system == PROMPTS[name]
    pc.close()


def test_a_new_session_reads_the_head_from_its_snapshot(tmp_path: Path) -> None:
    model, tok, dirs, reference = llama_with_loras(tmp_path)
    pc = percache.enable(model, tok, store=tmp_path / "store")
    pc.personas.add("a", PROMPTS["a"], adapter=dirs["a"])
    pc.personas.add("b", PROMPTS["b"], adapter=dirs["b"])
    first = pc.chat("Hello there.", persona="a", max_new_tokens=4)
    assert first.stats.persona_head == "stored"
    head = len(pc.sessions.layout.head(PROMPTS["a"])[0])
    pc.sessions.create("other")
    reply = pc.chat("What is on Friday?", session="other", persona="a", max_new_tokens=4)
    assert reply.stats.persona_head == "snapshot" and reply.stats.persona_head_tokens == head
    assert reply.stats.tokens_reused >= head  # prefix blocks of the K/V store may continue it
    _check(reply, reference, "a")
    pc.close()
    again = percache.enable(model, tok, store=tmp_path / "store")  # the personas are in the store
    assert [p.name for p in again.personas.list()] == ["a", "b"]
    resumed = again.chat("Go on.", session="other", persona="a", max_new_tokens=4)  # saved under a's weights
    assert resumed.stats.restored_from == "snapshot" and resumed.stats.history_recomputed == 0
    assert resumed.stats.persona_head == "session" and resumed.turn_id == 2
    _check(resumed, reference, "a")
    again.sessions.create("third")
    reply = again.chat("And Monday?", session="third", persona="a", max_new_tokens=4)
    assert reply.stats.persona_head == "snapshot" and reply.stats.persona_load_s > 0
    _check(reply, reference, "a")
    again.close()


def test_same_prompt_other_adapter_never_gets_the_other_heads_kv(tmp_path: Path) -> None:
    model, tok, dirs, reference = llama_with_loras(tmp_path)
    pc = percache.enable(model, tok, store=tmp_path / "store")
    pc.personas.add("a", "Same prompt.", adapter=dirs["a"])
    pc.personas.add("b", "Same prompt.", adapter=dirs["b"])
    pc.personas.add("base", "Same prompt.")
    pc.sessions.create("sa")
    pc.sessions.create("sb")
    pc.sessions.create("sbase")
    assert pc.chat("Hello there.", session="sa", persona="a", max_new_tokens=4).stats.persona_head == "stored"
    for session, name, adapter in (("sb", "b", "b"), ("sbase", "base", None)):
        reply = pc.chat("Hello there.", session=session, persona=name, max_new_tokens=4)
        assert reply.stats.persona_head == "stored" and reply.stats.tokens_reused == 0
        _check(reply, reference, adapter)
    pc.sessions.create("sb2")
    reply = pc.chat("Hello there.", session="sb2", persona="b", max_new_tokens=4)
    assert reply.stats.persona_head == "snapshot"  # b's own head, now stored
    _check(reply, reference, "b")
    pc.close()


def test_bad_persona_input_is_refused(tmp_path: Path) -> None:
    model, tok, dirs, _ = llama_with_loras(tmp_path)
    pc = percache.enable(model, tok)
    with pytest.raises(ValueError, match="persona name must be"):
        pc.personas.add("a b", "x")
    with pytest.raises(ValueError, match="non-empty system_prompt"):
        pc.personas.add("a", " ")
    with pytest.raises(ValueError, match="no adapter_config.json"):
        pc.personas.add("a", "x", adapter=tmp_path)
    with pytest.raises(ValueError, match="is not a directory"):
        pc.personas.add("a", "x", adapter=tmp_path / "missing")
    pc.personas.add("a", "x", adapter=dirs["a"])
    assert pc.personas.add("a", "x", adapter=dirs["a"]).name == "a"  # the same definition again
    with pytest.raises(ValueError, match="already exists with another definition"):
        pc.personas.add("a", "y")
    with pytest.raises(KeyError, match="no persona 'zz' .known: a"):
        pc.chat("Hi.", persona="zz")
    pc.personas.remove("a")
    assert pc.personas.list() == []
    pc.close()


def test_one_session_switching_persona_recomputes_under_the_new_adapter(tmp_path: Path) -> None:
    model, tok, dirs, reference = llama_with_loras(tmp_path)
    pc = percache.enable(model, tok, store=tmp_path / "store")
    pc.personas.add("a", "Same prompt.", adapter=dirs["a"])
    pc.personas.add("b", "Same prompt.", adapter=dirs["b"])
    pc.personas.add("c", "Another prompt.", adapter=dirs["b"])
    for i, (name, adapter) in enumerate([("a", "a"), ("b", "b"), ("a", "a"), ("a", "a"), ("c", "b")]):
        reply = pc.chat(MESSAGES[i % 3] + f" ({i})", persona=name, max_new_tokens=4)
        _check(reply, reference, adapter)
        if i in (1, 2, 4):  # the weights or the head changed: the history is computed again
            assert reply.stats.history_recomputed > 0
        if i == 3:  # same persona again: the session's K/V is reused
            assert reply.stats.history_recomputed == 0 and reply.stats.persona_head == "session"
    assert reply.stats.persona_switched and pc.sessions.get("default").system == "Another prompt."
    pc.close()


def test_a_peft_model_keeps_its_own_adapter_outside_persona_turns(tmp_path: Path) -> None:
    model, tok, dirs, reference = llama_with_loras(tmp_path)
    peft = pytest.importorskip("peft")
    wrapped = peft.PeftModel.from_pretrained(model, str(dirs["a"]), adapter_name="mine", is_trainable=True)
    wrapped.eval()
    trainable = {n for n, p in wrapped.named_parameters() if p.requires_grad}
    assert trainable  # the user's adapter is being trained
    pc = percache.enable(wrapped, tok)
    pc.personas.add("b", PROMPTS["b"], adapter=dirs["b"])
    pc.personas.add("plain", PROMPTS["plain"])
    assert wrapped.active_adapters == ["mine"]
    for name, adapter in (("b", "b"), ("plain", None), ("b", "b")):
        pc.sessions.create(f"{name}-{len(pc.sessions.names())}")
        reply = pc.chat("Hello there.", session=f"{name}-{len(pc.sessions.names()) - 1}", persona=name,
                        max_new_tokens=4)
        _check(reply, reference, adapter)
        assert wrapped.active_adapters == ["mine"]
        assert {n for n, p in wrapped.named_parameters() if p.requires_grad} == trainable
    reply = pc.chat("Hello there.", max_new_tokens=4)  # no persona: the user's adapter ("a")
    _check(reply, reference, "a")
    pc.personas.remove("b")  # its adapter leaves the model; the user's stays active and trainable
    assert wrapped.active_adapters == ["mine"] and "persona-b" not in wrapped.peft_config
    assert {n for n, p in wrapped.named_parameters() if p.requires_grad} == trainable
    pc.sessions.create("after")
    _check(pc.chat("Hello there.", session="after", max_new_tokens=4), reference, "a")
    pc.close()


def test_a_lora_personas_sessions_are_listed_while_no_persona_is_active(tmp_path: Path) -> None:
    model, tok, dirs, _ = llama_with_loras(tmp_path)
    pc = percache.enable(model, tok, store=tmp_path / "store")
    pc.personas.add("a", PROMPTS["a"], adapter=dirs["a"])
    pc.sessions.create("pirate")
    pc.chat("Hello there.", session="pirate", persona="a", max_new_tokens=4)
    live = {i.name: i for i in pc.sessions.list()}["pirate"]
    pc.close()
    again = percache.enable(model, tok, store=tmp_path / "store")
    infos = {i.name: i for i in again.sessions.list()}
    assert set(infos) == {"default", "pirate"}  # "pirate" is saved under a's weights only
    pirate = infos["pirate"]
    assert pirate.turns == 1 and pirate.system == PROMPTS["a"] and pirate.fingerprint
    assert (pirate.tokens, pirate.kv_tokens, pirate.kv_bytes) == (live.tokens, live.kv_tokens, live.kv_bytes)
    assert infos["default"].fingerprint == ""
    resumed = again.chat("Go on.", session="pirate", persona="a", max_new_tokens=4)
    assert resumed.turn_id == 2 and resumed.stats.restored_from == "snapshot"
    again.close()


def test_a_persona_defined_again_runs_under_its_new_adapter(tmp_path: Path) -> None:
    # the adapter was loaded under the persona's name alone: removed and added again with
    # another adapter, or with its adapter saved again in place, the persona kept running
    # under the weights loaded first
    model, tok, dirs, reference = llama_with_loras(tmp_path)
    moving = tmp_path / "moving"
    shutil.copytree(dirs["a"], moving)
    pc = percache.enable(model, tok, store=tmp_path / "store")
    pc.personas.add("p", "Same prompt.", adapter=dirs["a"])
    _check(pc.chat(MESSAGES[0], persona="p", max_new_tokens=4), reference, "a")
    pc.personas.remove("p")
    pc.personas.add("p", "Same prompt.", adapter=dirs["b"])
    _check(pc.chat(MESSAGES[1], persona="p", max_new_tokens=4), reference, "b")
    pc.personas.add("q", "Same prompt.", adapter=moving)
    _check(pc.chat(MESSAGES[2], persona="q", max_new_tokens=4), reference, "a")
    time.sleep(0.01)  # a new modification time even on coarse clocks
    for f in dirs["b"].iterdir():  # the adapter saved again in its directory
        shutil.copy(f, moving / f.name)
    _check(pc.chat(MESSAGES[0], persona="q", max_new_tokens=4), reference, "b")
    pc.close()
