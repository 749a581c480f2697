"""Forget really forgets: no file of the store holds the fact's text afterwards, and an answer
built on it is no longer served."""

from __future__ import annotations

import copy
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

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


def _files_holding_bytes(root: Path, needles: list[bytes]) -> list[str]:
    """Like ``_files_holding``, byte for byte (tensor bytes must not be case-folded)."""
    return [f"{path.name}: {i}" for path in root.rglob("*") if path.is_file()
            for i, n in enumerate(needles) if n in path.read_bytes()]


@dataclass
class HeldFact:
    """A saved session whose memory region held a fact, and what the store kept of it."""

    fact_id: str
    needles: list[bytes]  # its text and its token ids, as the database holds them
    kv: list[bytes]  # layer 0's keys (head 0) at its positions and every later one
    blocks: list[str]  # the stored prefix blocks reaching past its position

    def check_gone(self, root: Path, model: Any, tok: Any, config: dict[str, Any]) -> None:
        """No file of the store holds the fact's text, ids or K/V; a new turn works without it."""
        assert _files_holding(root, self.needles) == []
        assert _files_holding_bytes(root, self.kv) == []
        pc = percache.enable(model, tok, **config)
        assert not any(pc.store.contains(key) for key in self.blocks)
        reply = pc.chat("And now?", memory_scope="ana", max_new_tokens=2)
        assert "Quillberry" not in tok.decode(reply.prompt_ids)
        pc.close()


def session_holding_a_fact(model: Any, tok: Any, config: dict[str, Any]) -> HeldFact:
    """Two chat turns that recall a fact into the region and publish prefix blocks; closed."""
    pc = percache.enable(model, tok, **config)
    fact_id = pc.memory.add("Ana drinks Quillberry tea every morning", scope="ana").fact.id
    pc.chat("What tea does Ana drink?", memory_scope="ana", max_new_tokens=2)
    pc.chat("And in the evening?", memory_scope="ana", max_new_tokens=2)
    session = pc.sessions.get("default")
    at = [f.fact_id for f in session.memory].index(fact_id)
    start = len(session.head_ids) + len(session.memory_header) + sum(len(f.ids) for f in session.memory[:at])
    keys = session.cache.layers[0].keys
    held = HeldFact(fact_id, [b"quillberry", json.dumps(list(session.memory[at].ids))[1:-1].encode()],
                    [keys[0, 0, p].contiguous().numpy().tobytes() for p in range(start, keys.shape[2])],
                    [n.key for n in pc.store.nodes() if n.start + n.n_tokens > start and "chunk" not in n.extra])
    assert held.blocks, "the test needs prefix blocks holding the fact's positions"
    assert _files_holding_bytes(Path(config["store"]), held.kv[:1]), "the test must see the fact's K/V"
    pc.close()
    return held


@pytest.mark.parametrize("later", ["other block size", "other weights"])
def test_forget_deletes_the_prefix_blocks_of_saved_sessions_stored_under_other_settings(
        tmp_path: Path, later: str) -> None:
    model, tok = tiny_pair("llama")
    config = dict(store=tmp_path, embedder="hash", predict="off", memory_recall=True, memory_threshold=0.0,
                  memory_recall_mode="splice", prefix_block_tokens=8)
    held = session_holding_a_fact(model, tok, config)
    if later == "other block size":
        config["prefix_block_tokens"] = 16
    else:  # e.g. a persona's adapter: the saved session's blocks are under another fingerprint
        model = copy.deepcopy(model)
        with torch.no_grad():
            next(model.parameters()).add_(0.01)
    pc = percache.enable(model, tok, **config)
    pc.memory.forget(held.fact_id)
    pc.close()
    held.check_gone(tmp_path, model, tok, config)
