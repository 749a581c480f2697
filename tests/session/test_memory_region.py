"""The memory region (Config.memory_recall_mode 'splice'): facts' K/V computed once, stored and
spliced; exact where the position and the ids before it match, shifted and reported otherwise;
a region change never leaves K/V that attended to a fact no longer in the conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import percache_plugin as percache
from percache_plugin.session.memory_region import fact_kv_key
from tests.helpers import baseline, tiny_pair

FACTS = ["Ana drinks Quillberry tea every morning", "Ana keeps a Quillberry plant on her desk",
         "Ana bought Quillberry seeds in May"]
ASK = "What Quillberry things does Ana have?"


@pytest.fixture(scope="module")
def pair() -> Any:
    return tiny_pair("llama")


def _enable(pair: Any, **config: Any) -> Any:
    model, tok = pair
    config.setdefault("memory_recall_mode", "splice")
    pc = percache.enable(model, tok, embedder="hash", predict="off", memory_recall=True,
                         memory_threshold=0.0, session_blocks=False, **config)
    ids = [pc.memory.add(f, scope="ana").fact.id for f in FACTS]
    pc.memory.add("Bob repairs old radios", scope="ana")  # not flat: one candidate is far
    return pc, ids


def _full_forward(model: Any, ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]), past_key_values=cache, use_cache=True)
    return [(lay.keys, lay.values) for lay in cache.layers]


def _store_then_chat(pc: Any, system: str) -> Any:
    """Session "a" ("Be brief.") computes and stores the facts; a new session with ``system`` chats."""
    pc.sessions.create("a", system="Be brief.")
    pc.chat(ASK, session="a", memory_scope="ana", max_new_tokens=3)
    pc.sessions.create("c", system=system)
    return pc.chat(ASK, session="c", memory_scope="ana", max_new_tokens=3)


def _check_generate(pc: Any, reply: Any, n: int = 3) -> None:
    with pc.disabled():
        want, logits = baseline(pc.model, reply.prompt_ids, n)
    assert reply.token_ids == want
    assert (reply.first_logits - logits).abs().max().item() <= 1e-4


def test_facts_are_computed_once_then_spliced_exactly_at_the_same_position(pair: Any) -> None:
    pc, ids = _enable(pair)
    pc.sessions.create("a", system="Be brief.")
    first = pc.chat(ASK, session="a", memory_scope="ana", max_new_tokens=3)
    assert sorted(first.stats.fact_ids) == sorted(ids)
    session = pc.sessions.get("a")
    assert [f.fact_id for f in session.memory] == first.stats.fact_ids
    assert first.stats.memory_facts_stored == 3 and first.stats.memory_spliced_tokens == 0
    text = pc.tokenizer.decode(first.prompt_ids)
    assert text.index("Be brief.") < text.index("Relevant memories:") < text.index(ASK)
    _check_generate(pc, first)
    region = slice(len(session.head_ids) + len(session.memory_header), session.turns_start)
    stored = [(lay.keys[0, :, region].clone(), lay.values[0, :, region].clone()) for lay in session.cache.layers]

    pc.sessions.create("b", system="Be brief.")
    again = pc.chat(ASK, session="b", memory_scope="ana", max_new_tokens=3)
    s = again.stats
    n_facts = sum(len(f.ids) for f in session.memory)
    assert (s.memory_spliced_tokens, s.memory_shifted_tokens, s.memory_recomputed_tokens) == (n_facts, 0, 0)
    assert not s.approximate and s.memory_facts_stored == 0
    assert again.prompt_ids == first.prompt_ids
    # The spliced K/V is the stored K/V bit for bit, and the turn equals plain generate.
    b = pc.sessions.get("b")
    for (k, v), lay in zip(stored, b.cache.layers, strict=True):
        assert torch.equal(lay.keys[0, :, region], k) and torch.equal(lay.values[0, :, region], v)
    _check_generate(pc, again)
    full = _full_forward(pc.model, b.ids[:b.cache.get_seq_length()])
    # fp32 summation-order error only: measured up to 4.1e-6 (keys scale with the weights' std,
    # tests.models.TINY_INIT_RANGE); 1e-5 left under 3x headroom.
    for (k, v), lay in zip(full, b.cache.layers, strict=True):
        assert (lay.keys - k).abs().max().item() <= 1e-4 and (lay.values - v).abs().max().item() <= 1e-4
    pc.disable()


def test_a_fact_at_another_position_is_shifted_reported_and_close(pair: Any) -> None:
    pc, _ = _enable(pair)
    reply = _store_then_chat(pc, "You are a very patient assistant; answer in full sentences.")
    s = reply.stats
    n_facts = sum(len(f.ids) for f in pc.sessions.get("c").memory)
    assert s.approximate and s.memory_recomputed_tokens == 3 * 4
    assert s.memory_spliced_tokens == s.memory_shifted_tokens == n_facts - 12
    assert pc.sessions.get("c").approx_from is not None
    with pc.disabled():
        want, logits = baseline(pc.model, reply.prompt_ids, 1)
    kl = torch.nn.functional.kl_div(reply.first_logits.log_softmax(-1), logits.log_softmax(-1),
                                    log_target=True, reduction="sum").item()
    print(f"shifted splice: KL {kl:.5f}, top-1 {reply.token_ids[0] == want[0]}")
    assert kl < 0.05
    pc.disable()
    # Every shifted position computed again: exact, nothing reported approximate.
    pc, _ = _enable(pair, memory_recompute_head=10_000)
    reply = _store_then_chat(pc, "Another system prompt.")
    assert not reply.stats.approximate and reply.stats.memory_shifted_tokens == 0
    _check_generate(pc, reply)
    pc.disable()


def test_splice_exact_mode_computes_what_it_cannot_splice_exactly(pair: Any) -> None:
    pc, _ = _enable(pair, memory_recall_mode="splice-exact")
    reply = _store_then_chat(pc, "Another system prompt.")
    assert not reply.stats.approximate and reply.stats.memory_spliced_tokens == 0
    _check_generate(pc, reply)
    pc.sessions.create("b", system="Be brief.")
    assert pc.chat(ASK, session="b", memory_scope="ana", max_new_tokens=3).stats.memory_spliced_tokens > 0
    pc.disable()


def test_a_region_change_recomputes_the_turns_after_it(pair: Any) -> None:
    pc, ids = _enable(pair, memory_k=1, memory_recall_mode="splice-exact")  # exact: compare with generate
    pc.sessions.create("s", system="Be brief.")
    one = pc.chat("Quillberry tea every morning?", session="s", memory_scope="ana", max_new_tokens=3)
    two = pc.chat("Quillberry tea every morning again?", session="s", memory_scope="ana", max_new_tokens=3)
    assert two.stats.fact_ids == one.stats.fact_ids and two.stats.history_recomputed == 0
    three = pc.chat("Quillberry seeds bought in May?", session="s", memory_scope="ana", max_new_tokens=3)
    session = pc.sessions.get("s")
    assert three.stats.fact_ids != one.stats.fact_ids and len(session.memory) == 2
    assert three.stats.history_recomputed > 0  # the turns after the region are computed again
    assert [t.turn_id for t in session.turns] == [1, 2, 3]
    _check_generate(pc, three)
    # Forgetting the first fact takes it out of the region; what followed it is computed again.
    gone = one.stats.fact_ids[0]
    pc.memory.forget(gone)
    four = pc.chat("Anything else?", session="s", memory_scope="ana", max_new_tokens=3)
    assert gone not in [f.fact_id for f in session.memory]
    assert FACTS[ids.index(gone)] not in pc.tokenizer.decode(four.prompt_ids)
    _check_generate(pc, four)
    pc.disable()


def test_an_updated_fact_replaces_its_old_text_in_the_region(pair: Any) -> None:
    pc, ids = _enable(pair, memory_k=1)
    first = pc.chat("Quillberry tea every morning?", memory_scope="ana", max_new_tokens=3)
    fact = first.stats.fact_ids[0]
    old_key = fact_kv_key(pc.fingerprint, pc.sessions.get("default").memory[0])
    assert pc.store.contains(old_key)
    pc.memory.update(fact, "Ana now drinks Zorbleberry tea")
    assert not pc.store.contains(old_key)  # the old text's K/V left with it
    reply = pc.chat("Hello.", memory_scope="ana", max_new_tokens=3)
    text = pc.tokenizer.decode(reply.prompt_ids)
    assert "Zorbleberry" in text and FACTS[ids.index(fact)] not in text
    _check_generate(pc, reply)
    pc.disable()


def test_the_region_is_saved_and_restored_with_the_session(pair: Any, tmp_path: Path) -> None:
    pc, _ = _enable(pair, store=tmp_path / "store")
    first = pc.chat(ASK, memory_scope="ana", max_new_tokens=3)
    memory = list(pc.sessions.get("default").memory)
    pc.close()
    model, tok = pair
    again = percache.enable(model, tok, store=tmp_path / "store", embedder="hash", predict="off",
                            memory_recall=True, memory_threshold=0.0, memory_recall_mode="splice",
                            session_blocks=False)
    assert again.sessions.get("default").memory == memory
    reply = again.chat(ASK, memory_scope="ana", max_new_tokens=3)
    assert reply.stats.restored_from == "snapshot" and reply.stats.history_recomputed == 0
    assert reply.prompt_ids[:len(first.prompt_ids)] == first.prompt_ids
    _check_generate(again, reply)
    again.close()


def test_recall_in_text_mode_drops_a_sessions_region(pair: Any) -> None:
    pc, _ = _enable(pair)
    pc.chat(ASK, memory_scope="ana", max_new_tokens=3)
    assert pc.sessions.get("default").memory
    pc.configure(memory_recall_mode="text")
    reply = pc.chat(ASK, memory_scope="ana", max_new_tokens=3)
    assert not pc.sessions.get("default").memory and reply.stats.memory_spliced_tokens == 0
    assert pc.tokenizer.decode(reply.prompt_ids).count("Relevant memories:") == 1
    _check_generate(pc, reply)
    pc.disable()


def test_a_superseding_fact_takes_the_superseded_ones_place(pair: Any) -> None:
    model, tok = pair
    pc = percache.enable(model, tok, embedder="hash", predict="off", memory_recall=True, memory_threshold=0.0,
                         memory_recall_mode="splice-exact", session_blocks=False)  # exact: compare with generate
    old = pc.memory.add("Ana lives in Lisbon", scope="ana", metadata={"subject": "home"}).fact
    bob = pc.memory.add("Bob repairs old radios", scope="ana").fact
    pc.chat("Where does Ana live?", memory_scope="ana", max_new_tokens=3)
    assert {f.fact_id for f in pc.sessions.get("default").memory} == {old.id, bob.id}
    before = [f.fact_id for f in pc.sessions.get("default").memory]
    new = pc.memory.add("Ana lives in Porto", scope="ana", metadata={"subject": "home"}).fact
    pc.configure(memory_threshold=1.0)  # nothing is recalled: the region changes only by the supersede
    reply = pc.chat("Hello.", memory_scope="ana", max_new_tokens=3)
    assert reply.stats.fact_ids == []
    assert [f.fact_id for f in pc.sessions.get("default").memory] == [new.id if i == old.id else i for i in before]
    text = tok.decode(reply.prompt_ids)
    assert "Porto" in text and "Lisbon" not in text
    _check_generate(pc, reply)
    pc.disable()


class _OtherStore:
    """A replacement store: takes every K/V write (``percache_store_chunk``)."""

    def __init__(self) -> None:
        self.pieces: dict[str, Any] = {}

    @percache.hookimpl
    def percache_store_chunk(self, ctx: Any, key: str, piece: Any, parent: Any, kv: Any, exact: bool) -> bool:
        self.pieces[key] = piece
        return True


def test_fact_kv_is_written_through_the_store_chunk_hook_with_its_position(pair: Any) -> None:
    pc, _ = _enable(pair)
    other = _OtherStore()
    pc.plugins.register(other)
    reply = pc.chat(ASK, memory_scope="ana", max_new_tokens=3)
    session = pc.sessions.get("default")
    assert session.memory and reply.stats.memory_facts_stored == len(session.memory)
    pos = len(session.head_ids) + len(session.memory_header)
    for fact in session.memory:
        key = fact_kv_key(pc.fingerprint, fact)
        piece = other.pieces[key]
        assert (piece.start, piece.token_ids, piece.segment.id) == (pos, fact.ids, fact.fact_id)
        assert not pc.store.contains(key)  # the replacement took it; the built-in store none
        pos += len(fact.ids)
    pc.disable()


def test_facts_stored_rounded_are_recomputed_for_a_handle_that_keeps_kv_exact(pair: Any) -> None:
    pc, _ = _enable(pair, storage_dtype="float16")
    pc.sessions.create("a", system="Be brief.")
    pc.chat(ASK, session="a", memory_scope="ana", max_new_tokens=3)
    pc.sessions.create("b", system="Be brief.")
    assert pc.chat(ASK, session="b", memory_scope="ana", max_new_tokens=3).stats.approximate  # said
    pc.configure(storage_dtype=None)
    pc.sessions.create("c", system="Be brief.")
    exact = pc.chat(ASK, session="c", memory_scope="ana", max_new_tokens=3)
    assert not exact.stats.approximate and exact.stats.memory_spliced_tokens == 0
    _check_generate(pc, exact)
    pc.sessions.create("d", system="Be brief.")  # the recomputed facts replaced the rounded ones
    again = pc.chat(ASK, session="d", memory_scope="ana", max_new_tokens=3)
    assert not again.stats.approximate and again.stats.memory_spliced_tokens > 0
    _check_generate(pc, again)
    pc.disable()


def test_the_turn_after_a_shifted_splice_still_says_approximate(pair: Any) -> None:
    pc, _ = _enable(pair)
    first = _store_then_chat(pc, "Be very very brief.")
    assert first.stats.memory_shifted_tokens and first.stats.approximate
    later = pc.chat(ASK + " Again?", session="c", memory_scope="ana", max_new_tokens=3)
    assert not later.stats.memory_shifted_tokens  # the region's K/V stays: shifted in the turn before
    assert later.stats.approximate
    pc.close()


def test_splice_exact_configured_later_computes_the_shifted_facts_again(pair: Any) -> None:
    # 'splice-exact' after 'splice': the facts 'splice' shifted into the region stayed, and
    # every later turn attended to them
    pc, _ = _enable(pair)
    first = _store_then_chat(pc, "Be very very brief.")
    assert first.stats.memory_shifted_tokens and first.stats.approximate
    pc.configure(memory_recall_mode="splice-exact")
    later = pc.chat(ASK + " Again?", session="c", memory_scope="ana", max_new_tokens=3)
    assert not later.stats.approximate and later.stats.history_recomputed
    _check_generate(pc, later)
    pc.close()


def test_splice_exact_computes_the_shifted_facts_of_a_restored_session_again(pair: Any, tmp_path: Path) -> None:
    # the snapshot of a session 'splice' shifted facts into, resumed by a 'splice-exact' handle
    pc, _ = _enable(pair, store=tmp_path)
    first = _store_then_chat(pc, "Be very very brief.")
    assert first.stats.memory_shifted_tokens and first.stats.approximate
    pc.close()
    pc = percache.enable(*pair, store=tmp_path, embedder="hash", predict="off", memory_recall=True,
                         memory_threshold=0.0, session_blocks=False, memory_recall_mode="splice-exact")
    later = pc.chat(ASK + " Again?", session="c", memory_scope="ana", max_new_tokens=3)
    assert later.stats.restored_from == "snapshot"
    assert not later.stats.approximate and later.stats.history_recomputed
    _check_generate(pc, later)
    pc.close()
