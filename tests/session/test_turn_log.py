"""Chat turns are logged with their context hash, fact ids, output and latency; pc.feedback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.turnlog import TurnRecord, context_hash
from tests.helpers import tiny_pair


class Watch:
    """Sees every logged turn."""

    def __init__(self) -> None:
        self.logged: list[TurnRecord] = []

    @percache.hookimpl
    def percache_turn_logged(self, ctx: Any, record: TurnRecord) -> None:
        self.logged.append(record)


def test_each_turn_is_logged_and_feedback_reaches_it(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    watch = Watch()
    pc = percache.enable(model, tok, store=tmp_path, plugins=[watch])
    pc.sessions.create("s", system="Be brief.")
    first = pc.chat("Hello there.", session="s", max_new_tokens=3)
    second = pc.chat("And then?", session="s", max_new_tokens=3)
    assert [r.turn_id for r in watch.logged] == [1, 2]
    rec = pc.turn_log.get(2, "s")
    assert rec == watch.logged[1] and rec.log_id == second.stats.log_id > first.stats.log_id
    assert rec.context_hash == context_hash(second.prompt_ids) and rec.prompt_tokens == len(second.prompt_ids)
    assert rec.history == (("Hello there.", first.text),) and rec.output == second.text
    assert rec.system == "Be brief." and rec.fingerprint == pc.fingerprint and rec.persona is None
    assert rec.latency_s == second.stats.total_s and 0 < rec.ttft_s <= rec.latency_s
    assert rec.fact_ids == ()
    updated = pc.feedback(2, session="s", accepted=False, edited_text="Better.")
    assert updated.edited_text == "Better." and updated.accepted is False
    with pytest.raises(percache.UnknownTurn, match="session 's' has no logged turn 3"):
        pc.feedback(3, session="s", accepted=True)
    pc.close()
    again = percache.enable(model, tok, store=tmp_path)
    assert again.turn_log.get(2, "s").edited_text == "Better."  # persisted
    again.chat("Elsewhere.", max_new_tokens=2)
    again.sessions.delete("s")  # a deleted session's turns leave the log
    assert [r.session for r in again.turn_log.records()] == ["default"]
    again.close()


def test_recalled_fact_ids_are_logged_with_the_turn(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, embedder="hash", predict="off", memory_recall=True,
                         memory_threshold=0.3)
    tea = pc.memory.add("Ana drinks Quillberry tea every morning", scope="ana").fact
    reply = pc.chat("Which Quillberry tea does Ana drink every morning?", memory_scope="ana", max_new_tokens=2)
    assert reply.stats.fact_ids == [tea.id]
    assert pc.turn_log.get(reply.turn_id, "default").fact_ids == (tea.id,)
    pc.close()
