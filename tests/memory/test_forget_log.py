"""Forget clears the context hash and prompt length of every logged turn whose context held the
fact: the turn that recalled it and the later turns of its session (the fact stayed in their
context: in the history as text, or in the memory region)."""

from __future__ import annotations

from pathlib import Path

import pytest

import percache_plugin as percache
from tests.helpers import tiny_pair

SECRET = "Zorblax the locker code is 4417 quartz"


@pytest.mark.parametrize("mode", ["text", "splice"])
def test_forget_clears_the_hash_of_every_later_context_that_held_the_fact(tmp_path: Path, mode: str) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, embedder="hash", predict="off", memory_recall=True,
                         memory_threshold=0.0, memory_k=1, memory_recall_mode=mode)
    try:
        fact = pc.memory.add(SECRET, scope="me").fact
        pc.memory.add("Zorblax owns a red bicycle with a bell", scope="me")
        pc.memory.add("Bob repairs old radios", scope="me")
        pc.sessions.create("other")
        kept = pc.chat("Who repairs old radios?", session="other", memory_scope="me", max_new_tokens=2)
        replies = [pc.chat(m, memory_scope="me", max_new_tokens=2) for m in
                   ("What is the Zorblax locker code?", "Does Zorblax own a red bicycle with a bell?")]
        assert replies[0].stats.fact_ids == [fact.id] and fact.id not in replies[1].stats.fact_ids
        assert all(SECRET in tok.decode(r.prompt_ids) for r in replies)  # both contexts held it
        pc.memory.forget(fact.id)
        for reply in replies:
            record = pc.turn_log.get(reply.turn_id, "default")
            assert (record.context_hash, record.prompt_tokens) == ("", 0)
        record = pc.turn_log.get(kept.turn_id, "other")
        assert record.context_hash and record.prompt_tokens == len(kept.prompt_ids)
    finally:
        pc.close()
