"""A stored answer is served only to a length cap greedy decoding would give it for (rag/qa_length)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import percache_plugin as percache
from tests.assistant.test_assistant import BEN, OLD, Q
from tests.helpers import tiny_pair

DOCS = [OLD, BEN]


def _pc(store: Path, eos: int | None = None) -> percache.PerCache:
    model, tok = tiny_pair("llama")
    if eos is not None:  # a token the model says after a few steps ends its answers
        model.generation_config.eos_token_id = eos
    return percache.enable(model, tok, store=store, embedder="hash", answer_grounding=False,
                           predict="off", kv_warm=False)


def _fresh(store: Path, eos: int | None = None, **gen: int) -> percache.Answer:
    """What a fresh store answers to Q with ``gen``."""
    fresh = _pc(store, eos)
    fresh.add_documents(DOCS, scope="alice")
    answer = fresh.ask(Q, scope="alice", **gen)
    fresh.close()
    assert answer.source == "generated"
    return answer


def test_an_answer_cut_by_its_cap_is_not_served_to_a_larger_cap(tmp_path: Path) -> None:
    pc = _pc(tmp_path / "s")
    pc.add_documents(DOCS, scope="alice")
    short = pc.ask(Q, scope="alice", max_new_tokens=5)
    assert short.source == "generated" and short.stats is not None and short.stats.new_tokens == 5
    assert pc.ask(Q, scope="alice", max_new_tokens=5).source == "qa_bank"
    after = pc.ask(Q, scope="alice")  # 64 tokens, as a fresh store writes
    assert pc.ask(Q, scope="alice").source == "qa_bank"  # the longer answer replaced it
    pc.close()
    expected = _fresh(tmp_path / "fresh")
    assert after.source == "generated" and after.text == expected.text != short.text


def test_a_smaller_cap_is_served_the_first_tokens_of_a_longer_answer(tmp_path: Path) -> None:
    pc = _pc(tmp_path / "s")
    pc.add_documents(DOCS, scope="alice")
    assert pc.ask(Q, scope="alice", max_new_tokens=12).source == "generated"
    served = {n: pc.ask(Q, scope="alice", max_new_tokens=n) for n in (1, 4, 12)}
    pc.close()
    for n, answer in served.items():
        assert answer.source == "qa_bank"
        assert answer.text == _fresh(tmp_path / f"fresh{n}", max_new_tokens=n).text


def test_an_answer_that_ended_on_eos_is_served_to_any_larger_cap(tmp_path: Path) -> None:
    probe = _pc(tmp_path / "probe")
    probe.add_documents(DOCS, scope="alice")
    probe.ask(Q, scope="alice", max_new_tokens=8)
    (entry,) = probe.qa_bank.entries()
    probe.close()
    assert entry.ended == "cap" and entry.tokens is not None and len(entry.tokens) == 8
    eos = entry.tokens[3]  # the model now stops at its 4th token, or earlier
    pc = _pc(tmp_path / "s", eos)
    pc.add_documents(DOCS, scope="alice")
    complete = pc.ask(Q, scope="alice")
    assert complete.stats is not None and not complete.not_stored
    length = complete.stats.new_tokens
    assert length <= 4 and pc.qa_bank.entries()[0].ended == "eos"
    larger = pc.ask(Q, scope="alice", max_new_tokens=100)
    same = pc.ask(Q, scope="alice", max_new_tokens=length)
    pc.close()
    assert larger.source == same.source == "qa_bank"
    assert larger.text == same.text == complete.text
    assert larger.text == _fresh(tmp_path / "f100", eos, max_new_tokens=100).text


def test_an_idle_answer_cut_by_the_background_cap_is_not_served_to_a_larger_cap(tmp_path: Path) -> None:
    pc = _pc(tmp_path / "s")
    pc.configure(background_max_new_tokens=5)
    pc.add_documents(DOCS, scope="alice")
    pc.idle_queue.push("answer", Q, "alice")
    pc.idle()
    assert len(pc.qa_bank.entries()) == 1
    assert pc.ask(Q, scope="alice", max_new_tokens=5).source == "qa_bank"
    after = pc.ask(Q, scope="alice", max_new_tokens=9)
    expected = _fresh(tmp_path / "fresh", max_new_tokens=9)
    assert after.source == "generated" and after.text == expected.text
    (entry,) = pc.qa_bank.entries()  # the longer answer replaced the idle one
    pc.close()
    assert entry.ended == "cap" and len(entry.tokens or ()) == 9


def test_an_answer_stored_before_lengths_were_recorded_is_generated_again(tmp_path: Path) -> None:
    pc = _pc(tmp_path / "s")
    pc.add_documents(DOCS, scope="alice")
    pc.ask(Q, scope="alice", max_new_tokens=5)
    entry_id = pc.qa_bank.entries()[0].id
    pc.ask("Who reviews the budget?", scope="alice", max_new_tokens=5)
    pc.qa_bank.correct(entry_id + 1, "Ben does.")
    pc.close()
    with sqlite3.connect(tmp_path / "s" / "percache.sqlite3") as db:  # the previous format
        db.execute("ALTER TABLE qa_entries DROP COLUMN tokens")
        db.execute("ALTER TABLE qa_entries DROP COLUMN ended")
    pc = _pc(tmp_path / "s")
    entries = pc.qa_bank.entries()
    assert [(e.tokens, e.ended) for e in entries] == [(None, None), (None, "given")]
    after = pc.ask(Q, scope="alice", max_new_tokens=5)  # its length is unknown: generated
    corrected = pc.ask("Who reviews the budget?", scope="alice")  # a correction is served
    again = pc.ask(Q, scope="alice", max_new_tokens=5)
    pc.close()
    assert after.source == "generated" and after.text == _fresh(tmp_path / "f", max_new_tokens=5).text
    assert corrected.source == again.source == "qa_bank" and corrected.text == "Ben does."
