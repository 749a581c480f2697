"""A forgotten fact leaves no hash of a context that held it in the turn log: the logged hash is
that of a prompt holding the fact's text, so with the system prompt and messages logged beside
it, it confirms a guess of that text. Nor that prompt's length: less the rest of the logged
context, it is the fact's length in tokens. The later turns of the session held the fact too
(in their history), so they lose theirs as well; a turn before the first recall keeps its own."""

from __future__ import annotations

from pathlib import Path

import pytest

import percache_plugin as percache
from percache_plugin.cli import main
from percache_plugin.turnlog import context_hash
from tests.helpers import tiny_pair
from tests.memory.test_forget_text import CONFIG, TEA, TURNS


@pytest.mark.parametrize("how", ["api", "cli"])
def test_a_forgotten_fact_leaves_no_context_hash_in_the_turn_log(tmp_path: Path, how: str) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, **{**CONFIG, "store": tmp_path})
    fact_id = pc.memory.add(TEA, scope="ana").fact.id
    pc.memory.add("Bob repairs old radios", scope="bob")
    pc.sessions.create("s", system="Be brief.")
    turns = [TURNS[1], TURNS[0], TURNS[2]]  # the "bob" turn first: its context never held the fact
    replies = [pc.chat(m, session="s", memory_scope=scope, max_new_tokens=3) for m, scope in turns]
    recalled = [fact_id in r.stats.fact_ids for r in replies]
    assert recalled == [False, True, True]
    held = [any(recalled[: i + 1]) for i in range(len(recalled))]
    assert [r.context_hash for r in pc.turn_log.records()] == [context_hash(r.prompt_ids) for r in replies]
    if how == "api":
        pc.memory.forget(fact_id)
    else:
        pc.close()
        assert main(["memory", "forget", str(tmp_path), fact_id]) == 0
        pc = percache.enable(model, tok, **{**CONFIG, "store": tmp_path})
    records = list(pc.turn_log.records())
    pc.close()
    # the turns whose context held it keep no hash; the turn before keeps its own
    assert [r.context_hash for r in records] == [
        "" if h else context_hash(r.prompt_ids) for h, r in zip(held, replies, strict=True)]
    # nor the prompt's length, which less the rest of the logged context is the fact's
    assert [r.prompt_tokens for r in records] == [
        0 if h else len(r.prompt_ids) for h, r in zip(held, replies, strict=True)]
