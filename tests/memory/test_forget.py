"""Forget really forgets: no file of the store holds the fact's text afterwards, and an answer
built on it is no longer served."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import percache_plugin as percache
from percache_plugin.memory.bank import UnknownFact
from tests.helpers import tiny_pair

SECRET = "Zorblax the locker code is 4417 quartz"


def _files_holding(root: Path, needles: list[bytes]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes().lower()
            found += [f"{path.name}: {n!r}" for n in needles if n in data]
    return found


def test_forget_removes_the_text_from_every_file_and_drops_answers(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, embedder="hash", answer_grounding=False, predict="off",
                         relevance_threshold=None, memory_threshold=0.0)
    fact = pc.memory.add(SECRET, scope="me", metadata={"subject": "locker code"}).fact
    pc.memory.update(fact.id, SECRET + " indeed")  # a history row holding the text
    pc.memory.add("Zorblax owns a red bicycle", scope="me")
    first = pc.ask("What is the Zorblax locker code?", scope="me", max_new_tokens=3)
    assert first.source == "generated" and fact.id in first.sources
    assert pc.ask("What is the Zorblax locker code?", scope="me", max_new_tokens=3).source == "qa_bank"
    assert any(n.extra.get("chunk") == fact.id for n in pc.store.nodes())
    needles = [b"4417 quartz", b"locker code is 4417"]
    assert _files_holding(tmp_path, needles), "the test must see the text before forgetting"

    report = pc.memory.forget(fact.id)
    assert report.answers == 1 and report.kv_nodes >= 1 and report.scrubbed
    assert not any(n.extra.get("chunk") == fact.id for n in pc.store.nodes())
    assert _files_holding(tmp_path, needles) == []
    with pytest.raises(UnknownFact, match="forgotten"):
        pc.memory.get(fact.id)
    again = pc.ask("What is the Zorblax locker code?", scope="me", max_new_tokens=3)
    assert again.source == "generated" and fact.id not in again.sources
    pc.disable()
    assert _files_holding(tmp_path, needles) == []


def test_facts_are_beside_chunks_in_ask_only_when_switched_on(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=None, embedder="hash", answer_grounding=False, predict="off",
                         relevance_threshold=None, memory_threshold=0.0, use_qa_bank=False)
    pc.add_documents(["The choir rehearsal moved to Friday."], scope="me")
    fact = pc.memory.add("Ana sings alto in the choir", scope="me").fact
    other = pc.memory.add("Ana sings alto in the choir", scope="you").fact
    answer = pc.ask("Who sings in the choir?", scope="me", max_new_tokens=2)
    assert fact.id in answer.sources and other.id not in answer.sources
    pc.configure(memory_in_ask=False)
    assert fact.id not in pc.ask("Who sings in the choir?", scope="me", max_new_tokens=2).sources
    pc.disable()


def test_forget_takes_a_spliced_fact_out_of_live_and_saved_sessions(tmp_path: Path) -> None:
    import json

    from percache_plugin.session.memory_region import fact_kv_key

    model, tok = tiny_pair("llama")
    config = dict(store=tmp_path, embedder="hash", predict="off", memory_recall=True, memory_threshold=0.0,
                  memory_recall_mode="splice")
    pc = percache.enable(model, tok, **config)
    fact = pc.memory.add(SECRET, scope="me").fact
    pc.memory.add("Zorblax owns a red bicycle", scope="me")
    pc.memory.add("Bob repairs old radios", scope="me")
    for name in ("live", "saved"):
        pc.sessions.create(name, system="Be brief.")
        pc.chat("What is the Zorblax locker code?", session=name, memory_scope="me", max_new_tokens=3)
    held = pc.sessions.get("live").memory
    ids = next(f.ids for f in held if f.fact_id == fact.id)
    key = fact_kv_key(pc.fingerprint, next(f for f in held if f.fact_id == fact.id))
    assert pc.store.contains(key)
    needles = [json.dumps(list(ids))[1:-1].encode()]
    assert _files_holding(tmp_path, needles), "the test must see the fact's ids before forgetting"
    pc.close()

    pc = percache.enable(model, tok, **config)
    live = pc.sessions.get("live")  # loaded; "saved" stays on disk only
    position = len(live.head_ids) + len(live.memory_header) + sum(
        len(f.ids) for f in live.memory[:[f.fact_id for f in live.memory].index(fact.id)])
    pc.memory.forget(fact.id)
    assert fact.id not in [f.fact_id for f in live.memory]
    assert live.cache.get_seq_length() <= position
    assert not pc.store.contains(key) and _files_holding(tmp_path, needles) == []
    reply = pc.chat("Anything else?", session="live", memory_scope="me", max_new_tokens=3)
    assert SECRET not in tok.decode(reply.prompt_ids)
    pc.close()

    pc = percache.enable(model, tok, **config)
    saved = pc.sessions.get("saved")
    assert fact.id not in [f.fact_id for f in saved.memory]
    assert saved.cache.get_seq_length() <= position  # the snapshot ends before the fact
    reply = pc.chat("Anything else?", session="saved", memory_scope="me", max_new_tokens=3)
    assert SECRET not in tok.decode(reply.prompt_ids)
    assert _files_holding(tmp_path, needles + [b"4417 quartz"]) == []
    pc.close()


def test_forget_removes_the_facts_retrieval_key_text_and_vector(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, embedder="hash", predict="off")
    turn = "Quillon: my vault combination is 8812 obsidian, keep it safe"
    fact = pc.memory.add("Quillon has a vault", scope="me", metadata={"context": turn}).fact
    keep = pc.memory.add("Quillon likes tea", scope="me", metadata={"context": "Quillon: tea please"}).fact
    needles = [b"8812 obsidian", b"quillon has a vault"]
    assert _files_holding(tmp_path, needles), "the test must see the key text before forgetting"
    assert pc.memory.search("vault combination obsidian", scope="me", k=1)[0].fact.id == fact.id
    pc.memory.forget(fact.id)
    assert _files_holding(tmp_path, needles) == []
    con = sqlite3.connect(tmp_path / "percache.sqlite3")
    assert con.execute("SELECT id FROM mem_keys").fetchall() == [(keep.id,)]
    con.close()
    pc.disable()
    assert _files_holding(tmp_path, needles) == []
