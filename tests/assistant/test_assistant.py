"""Assistant: content that changes under the cache is never answered from its old text."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LogitsProcessor, LogitsProcessorList

import percache_plugin as percache
from tests.helpers import tiny_pair

OLD = {"text": "Ana: the choir rehearsal moved to Friday at 6 pm in the small hall.", "id": "ana"}
NEW = {"text": "Ana: the choir rehearsal is cancelled, no more rehearsals this term.", "id": "ana"}
BEN = {"text": "Ben: the budget review is on Monday; travel costs are over plan.", "id": "ben"}
Q = "When is the choir rehearsal?"
GEN = {"max_new_tokens": 6}


def _pc(store: Path) -> percache.PerCache:
    model, tok = tiny_pair("llama")
    # draft_calibrate_idle off: tests using this count the other idle tasks
    return percache.enable(model, tok, store=store, embedder="hash", answer_grounding=False,
                           predict="off", kv_warm=False, draft_calibrate_idle=False)


def fresh_answer(store: Path, docs: list[dict[str, str]], **settings: object) -> percache.Answer:
    """What a fresh store with ``settings``, given only ``docs``, answers to :data:`Q`."""
    fresh = _pc(store)
    if settings:
        fresh.configure(**settings)
    fresh.add_documents(docs, scope="alice")
    answer = fresh.ask(Q, scope="alice", **GEN)
    fresh.close()
    return answer


def test_a_replaced_document_answers_like_a_fresh_store_given_only_the_new_text(tmp_path: Path) -> None:
    pc = _pc(tmp_path / "old")
    pc.add_documents([OLD, BEN], scope="alice")
    first = pc.ask(Q, scope="alice", **GEN)
    assert first.source == "generated" and len(pc.qa_bank.entries(scope="alice")) == 1
    old_chunk = next(c.id for c in pc.knowledge.chunks() if c.doc_id == "ana")
    assert any(n.extra.get("chunk") == old_chunk for n in pc.engine.store.nodes())
    pc.add_documents([NEW], scope="alice")
    after = pc.ask(Q, scope="alice", **GEN)
    assert old_chunk not in after.sources
    assert [e.question for e in pc.qa_bank.entries(scope="alice")] == [Q]  # only the new answer
    assert not any(n.extra.get("chunk") == old_chunk for n in pc.engine.store.nodes())
    pc.close()
    fresh = _pc(tmp_path / "fresh")
    fresh.add_documents([BEN, NEW], scope="alice")
    expected = fresh.ask(Q, scope="alice", **GEN)
    fresh.close()
    assert after.source == expected.source == "generated"
    assert after.sources == expected.sources and after.text == expected.text


def test_answers_follow_the_system_prompt_like_a_fresh_store(tmp_path: Path) -> None:
    # configure() takes effect from the next call: an answer generated under another system
    # prompt is not served; a fresh store given the new prompt generates the same answer.
    pc = _pc(tmp_path / "old")
    pc.add_documents([OLD, BEN], scope="alice")
    assert pc.ask(Q, scope="alice", **GEN).source == "generated"
    assert pc.ask(Q, scope="alice", **GEN).source == "qa_bank"
    pc.configure(system_prompt="Reply in French, in one word.")
    after = pc.ask(Q, scope="alice", **GEN)
    assert pc.ask(Q, scope="alice", **GEN).source == "qa_bank"  # its own answer is served
    pc.configure(system_prompt=percache.Config().system_prompt)
    assert pc.ask(Q, scope="alice", **GEN).source == "qa_bank"  # and so is the first one again
    pc.close()
    fresh = _pc(tmp_path / "fresh")
    fresh.configure(system_prompt="Reply in French, in one word.")
    fresh.add_documents([OLD, BEN], scope="alice")
    expected = fresh.ask(Q, scope="alice", **GEN)
    fresh.close()
    assert after.source == expected.source == "generated" and after.text == expected.text


def test_answers_follow_the_chat_template_setting(tmp_path: Path) -> None:
    pc = _pc(tmp_path / "old")
    pc.add_documents([OLD, BEN], scope="alice")
    pc.ask(Q, scope="alice", **GEN)
    pc.configure(chat_template=False)
    after = pc.ask(Q, scope="alice", **GEN)
    pc.close()
    fresh = _pc(tmp_path / "fresh")
    fresh.configure(chat_template=False)
    fresh.add_documents([OLD, BEN], scope="alice")
    expected = fresh.ask(Q, scope="alice", **GEN)
    fresh.close()
    assert after.source == expected.source == "generated" and after.text == expected.text


def test_a_handle_sharing_the_store_is_not_served_the_replaced_documents_answer(tmp_path: Path) -> None:
    writer, reader = _pc(tmp_path / "s"), _pc(tmp_path / "s")
    writer.add_documents([OLD, BEN], scope="alice")
    writer.ask(Q, scope="alice", **GEN)
    assert reader.ask(Q, scope="alice", **GEN).source == "qa_bank"
    writer.add_documents([NEW], scope="alice")
    after = reader.ask(Q, scope="alice", **GEN)
    assert after.source == "generated"
    assert [reader.knowledge.chunk(c).text for c in after.sources if "choir" in reader.knowledge.chunk(c).text] \
        == [NEW["text"]]
    writer.close()
    reader.close()


def test_an_answer_on_a_paragraph_passed_to_another_document_is_generated_again(tmp_path: Path) -> None:
    # ask() orders a prompt's chunks by document: the paragraph now sorts after Bob's note.
    shared = "Travel policy: the choir rehearsal trip is economy class only."
    docs = [{"id": "ana", "text": "Ana: my notes.\n\n" + shared},
            {"id": "bob", "text": "Bob: the choir rehearsal moved to Friday."},
            {"id": "cat", "text": "Cat: my notes.\n\n" + shared}]
    ana_again = {"id": "ana", "text": "Ana: my notes."}
    pc = _pc(tmp_path / "old")
    pc.configure(chunk_words=5)
    pc.add_documents(docs, scope="alice")
    first = pc.ask(Q, scope="alice", **GEN)
    pc.add_documents([ana_again], scope="alice")
    after = pc.ask(Q, scope="alice", **GEN)
    pc.close()
    assert set(first.sources) == set(after.sources) and first.sources != after.sources
    expected = fresh_answer(tmp_path / "fresh", [ana_again, *docs[1:]], chunk_words=5)
    assert after.source == expected.source == "generated"
    assert (after.text, after.sources) == (expected.text, expected.sources)


class _AddDuringGeneration(LogitsProcessor):
    """Adds ``doc`` (by default: replaces Ana's) through another handle at the first decoding step."""

    observes_only = True  # leaves the scores as they are: the answer may be stored

    def __init__(self, other: percache.PerCache, doc: dict[str, str] = NEW) -> None:
        self.other, self.doc, self.done = other, doc, False

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if not self.done:
            self.done = True
            self.other.add_documents([self.doc], scope="alice")
        return scores


def test_an_answer_whose_document_was_replaced_while_it_was_generated_is_not_served(tmp_path: Path) -> None:
    writer, reader = _pc(tmp_path / "s"), _pc(tmp_path / "s")
    writer.add_documents([OLD, BEN], scope="alice")
    racing = writer.ask(Q, scope="alice", logits_processor=LogitsProcessorList([_AddDuringGeneration(reader)]),
                        **GEN)
    after = reader.ask(Q, scope="alice", **GEN)
    writer.close()
    reader.close()
    expected = fresh_answer(tmp_path / "fresh", [BEN, NEW])
    assert after.source == expected.source == "generated"
    assert (after.text, after.sources) == (expected.text, expected.sources)
    assert racing.source == "generated" and racing.not_stored.startswith("its sources changed")


def test_an_answer_is_not_served_once_a_document_added_while_it_was_generated_joins_its_prompt(
        tmp_path: Path) -> None:
    cat = {"id": "cat", "text": "Cat: the choir rehearsal needs a pianist."}
    writer, reader = _pc(tmp_path / "s"), _pc(tmp_path / "s")
    writer.add_documents([OLD, BEN], scope="alice")
    adding = _AddDuringGeneration(reader, cat)
    racing = writer.ask(Q, scope="alice", logits_processor=LogitsProcessorList([adding]), **GEN)
    after = reader.ask(Q, scope="alice", **GEN)
    writer.close()
    reader.close()
    expected = fresh_answer(tmp_path / "fresh", [OLD, BEN, cat])
    assert after.source == expected.source == "generated" and len(expected.sources) == 3
    assert (after.text, after.sources) == (expected.text, expected.sources)
    assert len(racing.sources) == 2 and racing.not_stored
