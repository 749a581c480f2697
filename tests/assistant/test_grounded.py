"""A generated answer that its sources do not support is stored but not served to paraphrases."""

from __future__ import annotations

import percache_plugin as percache
from percache_plugin.assistant.grounded import hold_back_unsupported
from percache_plugin.demo import SAMPLE_CHUNKS
from tests.helpers import tiny_pair

GEN = {"max_new_tokens": 4}
QUESTION = "When is the choir rehearsal?"


def _pc(**config: object) -> percache.PerCache:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, embedder="hash", predict="off", similarity_threshold=0.5,
                         background_max_new_tokens=4, **config)
    pc.add_documents(list(SAMPLE_CHUNKS), scope="u")
    return pc


def _store(pc: percache.PerCache, answer: str) -> tuple[str, ...]:
    a = pc.assistant
    query = a.query(QUESTION)
    chunks = list(pc.knowledge.chunks())
    a.hooks.qa_store(a.ctx, query, answer, "u", tuple(c.id for c in chunks), "predicted")
    return hold_back_unsupported(a, query, "u", answer, chunks)


def test_unsupported_answer_is_not_served_to_paraphrases() -> None:
    pc = _pc()
    reasons = _store(pc, "Thursday at 6 pm in the small hall.")
    assert reasons == ("'thursday' (the sources changed it to 'friday')",)
    [entry] = pc.qa_bank.entries(scope="u")
    assert entry.stale and entry.answer == "Thursday at 6 pm in the small hall."
    assert pc.ask("when is the choir rehearsal", scope="u", **GEN).source == "generated"
    s = pc.stats()
    assert s.answers_checked == 2 and s.answers_flagged >= 1  # the ask's own answer was checked too


def test_supported_answer_is_served() -> None:
    pc = _pc()
    assert _store(pc, "Friday at 6 pm in the small hall.") == ()
    a = pc.ask("when is the choir rehearsal", scope="u", **GEN)
    assert a.source == "qa_bank" and a.text == "Friday at 6 pm in the small hall."
    assert pc.stats().answers_flagged == 0


def test_the_check_can_be_switched_off() -> None:
    pc = _pc(answer_grounding=False)
    assert _store(pc, "Thursday at 6 pm in the small hall.") == ()
    assert pc.ask("when is the choir rehearsal", scope="u", **GEN).source == "qa_bank"
    assert pc.stats().answers_checked == 0


def test_generated_answers_carry_their_flags() -> None:
    pc = _pc()
    a = pc.ask("Who borrowed the projector?", scope="u", **GEN)
    assert a.source == "generated" and pc.stats().answers_checked == 1
    assert (pc.stats().answers_flagged == 1) == bool(a.unsupported)
