"""Forget reaches the chat turns a fact was recalled into as text (``memory_recall_mode``
'text'): their stored ids, the session's K/V snapshot and its prefix blocks, live and saved,
in-process and from the CLI; the next turn equals a plain prefill of the bare conversation."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.cli import main
from tests.helpers import baseline, tiny_pair
from tests.memory.test_forget import _files_holding, _files_holding_bytes

TEA = "Ana drinks Quillberry tea every morning"
# (message, memory scope): the "bob" turn recalls another fact only and keeps its memory block
TURNS = [("What tea does Ana drink?", "ana"), ("Who fixes radios?", "bob"), ("Is the tea green?", "ana")]
CONFIG = dict(embedder="hash", predict="off", memory_recall=True, memory_threshold=0.0, prefix_block_tokens=8)


def _ids_needle(ids: list[int]) -> bytes:
    """The bytes of ``ids`` as a JSON id array in the database holds them."""
    return json.dumps(ids)[1:-1].encode()


@dataclass
class Recalled:
    """Sessions whose turns recalled :data:`TEA` as text, and what the store kept of them."""

    fact_id: str
    needles: list[bytes]  # the text, its token ids, each tea turn's memory block ids
    kv: list[bytes]  # last layer's keys (head 0) from the first memory block on
    bare: dict[str, list[list[int]]]  # per session, each turn's user ids once the fact is gone

    def assert_gone(self, root: Path) -> None:
        assert _files_holding(root, self.needles) == []
        assert _files_holding_bytes(root, self.kv) == []


def chat_recalling(model: Any, tok: Any, config: dict[str, Any], names: list[str]) -> Recalled:
    """Sessions ``names`` chat :data:`TURNS` (the tea fact recalled as text into two turns of
    each); the handle is closed."""
    pc = percache.enable(model, tok, **config)
    fact_id = pc.memory.add(TEA, scope="ana").fact.id
    pc.memory.add("Bob repairs old radios", scope="bob")
    needles = [b"quillberry tea", _ids_needle(list(tok(TEA[4:], add_special_tokens=False)["input_ids"]))]
    kv, bare = [], {}
    for name in names:
        pc.sessions.create(name, system="Be brief.")
        for message, scope in TURNS:
            reply = pc.chat(message, session=name, memory_scope=scope, max_new_tokens=3)
            assert (fact_id in reply.stats.fact_ids) == (scope == "ana")
        session = pc.sessions.get(name)
        bare[name] = [t.bare_ids if fact_id in t.fact_ids else t.user_ids for t in session.turns]
        pos, first = session.turns_start, None
        for turn in session.turns:
            if fact_id in turn.fact_ids:
                assert turn.bare_ids is not None and turn.bare_ids != turn.user_ids
                same = next(i for i, (a, b) in enumerate(zip(turn.user_ids, turn.bare_ids, strict=False)) if a != b)
                first = pos + same if first is None else first
                needles.append(_ids_needle(turn.user_ids[same:len(turn.user_ids) - len(turn.bare_ids) + same]))
            pos += turn.n_tokens
        assert first is not None
        keys = session.cache.layers[-1].keys
        kv += [keys[0, 0, p].contiguous().numpy().tobytes() for p in range(first, keys.shape[2])]
    root = Path(config["store"])
    assert _files_holding(root, needles[:2]), "the test must see the fact's text and ids before forgetting"
    assert _files_holding_bytes(root, kv[:1]), "the test must see the K/V of a memory block"
    pc.close()
    return Recalled(fact_id, needles, kv, bare)


def next_turn_is_exact(pc: Any, tok: Any, name: str, bare: list[list[int]]) -> None:
    """The session's turns hold ``bare`` and its next turn equals a plain prefill of them."""
    session = pc.sessions.get(name)
    assert [t.user_ids for t in session.turns] == bare
    assert all(not t.fact_ids and t.bare_ids is None for t in session.turns[::2])
    assert session.turns[1].fact_ids  # the other fact's turn keeps its memory block
    before = list(session.ids)
    reply = pc.chat("And in the evening?", session=name, memory_scope="bob", max_new_tokens=3)
    assert reply.prompt_ids[:len(before)] == before
    assert "Quillberry" not in tok.decode(reply.prompt_ids)
    with pc.disabled():
        want, logits = baseline(pc.model, reply.prompt_ids, 3)
    assert reply.token_ids == want
    assert (reply.first_logits - logits).abs().max().item() <= 1e-4


def test_forget_rewrites_live_and_saved_turns_that_recalled_the_fact(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    config = dict(CONFIG, store=tmp_path)
    held = chat_recalling(model, tok, config, ["live", "saved"])
    pc = percache.enable(model, tok, **config)
    live = pc.sessions.get("live")  # loaded; "saved" stays on disk only
    start = live.turns_start
    pc.memory.forget(held.fact_id)
    assert live.cache.get_seq_length() <= start  # cut at the first turn that recalled it
    held.assert_gone(tmp_path)
    next_turn_is_exact(pc, tok, "live", held.bare["live"])
    pc.close()
    pc = percache.enable(model, tok, **config)
    next_turn_is_exact(pc, tok, "saved", held.bare["saved"])
    pc.close()
    held.assert_gone(tmp_path)


def test_cli_forget_rewrites_saved_turns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, tok = tiny_pair("llama")
    config = dict(CONFIG, store=tmp_path)
    held = chat_recalling(model, tok, config, ["a", "b"])
    assert main(["memory", "forget", str(tmp_path), held.fact_id]) == 0
    assert capsys.readouterr().out.rstrip().endswith("2 sessions (4 chat turns it was recalled into)")
    held.assert_gone(tmp_path)
    pc = percache.enable(model, tok, **config)
    for name in ("a", "b"):
        next_turn_is_exact(pc, tok, name, held.bare[name])
    pc.close()
    held.assert_gone(tmp_path)


def test_forget_in_a_handle_without_a_store(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, **dict(CONFIG, store=None))
    fact = pc.memory.add(TEA, scope="ana").fact
    pc.memory.add("Bob repairs old radios", scope="bob")
    for message, scope in TURNS:
        pc.chat(message, memory_scope=scope, max_new_tokens=3)
    session = pc.sessions.get("default")
    bare = [t.bare_ids if fact.id in t.fact_ids else t.user_ids for t in session.turns]
    start, blocks = session.turns_start, len(pc.store.nodes())
    assert blocks, "the test needs prefix blocks over the recalled turns"
    pc.memory.forget(fact.id)
    assert session.cache.get_seq_length() == start
    assert all(n.start + n.n_tokens <= start for n in pc.store.nodes())  # no block past the cut stays
    next_turn_is_exact(pc, tok, "default", bare)
    pc.close()


@pytest.mark.parametrize("mode", ["splice", "splice-exact"])
def test_spliced_modes_record_no_recalled_turns(tmp_path: Path, mode: str) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, **dict(CONFIG, store=tmp_path, memory_recall_mode=mode))
    fact = pc.memory.add(TEA, scope="ana").fact
    reply = pc.chat(TURNS[0][0], memory_scope="ana", max_new_tokens=3)
    assert fact.id in reply.stats.fact_ids
    turn = pc.sessions.get("default").turns[0]
    assert turn.fact_ids == [] and turn.bare_ids is None  # the fact is in the region, not the turn
    pc.close()


def test_an_updated_fact_leaves_the_turns_that_recalled_its_old_text() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, **CONFIG)
    fact = pc.memory.add(TEA, scope="ana").fact
    pc.memory.add("Bob repairs old radios", scope="bob")
    pc.sessions.create("s", system="Be brief.")
    first = pc.chat(TURNS[0][0], session="s", memory_scope="ana", max_new_tokens=3)
    assert "every morning" in tok.decode(first.prompt_ids)
    pc.memory.update(fact.id, "Ana drinks Quillberry coffee every evening")
    reply = pc.chat(TURNS[2][0], session="s", memory_scope="ana", max_new_tokens=3)
    text = tok.decode(reply.prompt_ids)
    assert "every morning" not in text and "every evening" in text  # only the new text
    with pc.disabled():
        want, logits = baseline(pc.model, reply.prompt_ids, 3)
    assert reply.token_ids == want
    assert (reply.first_logits - logits).abs().max().item() <= 1e-4
    pc.close()
