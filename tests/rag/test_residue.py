"""The residue guard: what two questions do not share must mean the same, the more so the less
alike the whole questions are."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pytest

from percache_plugin.rag.embeddings import Embedder, load_embedder
from percache_plugin.rag.guards import DEFAULT_MEANING_GUARDS, DEFAULT_TAU
from percache_plugin.rag.meaning import question_kind, question_shape
from percache_plugin.rag.qa_bank import QABank
from percache_plugin.rag.residue import (
    RESIDUE_ANCHOR,
    is_frame,
    residue_agrees,
    residue_needed,
    residue_verdicts,
    residues,
)
from tests.rag.test_qa_bank import CountingEmbedder

WITH_RESIDUE = (*sorted(DEFAULT_MEANING_GUARDS - {"residue"}), "residue")
WITHOUT_RESIDUE = tuple(sorted(DEFAULT_MEANING_GUARDS - {"residue"}))


def _shapes(a: str, b: str):  # type: ignore[no-untyped-def]
    return question_shape(a), question_shape(b)


class LockProbingEmbedder(CountingEmbedder):
    """Records each embed() call and, once ``bank`` is set, whether the bank's lock was free."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []
        self.bank: QABank | None = None
        self.lock_free: list[bool] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if self.bank is not None:  # another thread can take the lock only if nobody holds it
            got: list[bool] = []
            lock = self.bank._lock

            def probe() -> None:
                got.append(lock.acquire(timeout=1.0))
                if got[0]:
                    lock.release()

            t = threading.Thread(target=probe)
            t.start()
            t.join()
            self.lock_free.append(got[0])
        return super().embed(texts)


def _bank_holding(stored: str, answer: str) -> tuple[LockProbingEmbedder, QABank, str, np.ndarray]:
    """A bank holding ``stored``, the probe question and its vector; no embed() call yet."""
    embedder = LockProbingEmbedder()
    bank = QABank(None, embedder, byte_limit=None)
    bank.add(stored, answer)
    probe = "When did Jolene take Seraphim to the park?"
    vector = embedder.inner.embed([probe])[0]
    embedder.calls.clear()
    return embedder, bank, probe, vector


def test_residues_leave_out_shared_names_and_frame_words() -> None:
    a, b = _shapes("When did Jolene buy her pet Seraphim?", "When did Jolene take Seraphim to the park?")
    assert residues(a, b) == ("buy pet", "take park")
    a, b = _shapes("What did D say about the setup?", "What was D's opinion of the setup?")
    assert residues(a, b) == ("", "")  # say / opinion are question-frame words


def test_meet_is_not_a_frame_word_although_meeting_is() -> None:
    # "meet" shares the stem of the frame word "meeting": it was dropped, leaving "When did
    # James meet Samantha?" nothing to compare with "... ask Samantha to be his girlfriend?".
    a, b = _shapes("When did James meet Samantha?", "When did James ask Samantha to be his girlfriend?")
    assert residues(a, b) == ("meet", "ask girlfriend")
    assert is_frame("meeting") and is_frame("meetings") and not is_frame("meet")
    a, b = _shapes("What was said in the meeting about X?", "What did they say about X?")
    assert residues(a, b) == ("", "")


def test_the_needed_residue_agreement_falls_as_the_questions_grow_alike() -> None:
    assert residue_needed(RESIDUE_ANCHOR) == pytest.approx(0.6)
    assert residue_needed(0.84) == pytest.approx(0.3)
    assert residue_needed(0.94) == pytest.approx(0.0)
    assert residue_needed(0.80) > residue_needed(0.90)


def test_unrelated_residues_are_refused_unless_the_questions_are_nearly_the_same() -> None:
    calls: list[list[str]] = []

    def embed(texts: Sequence[str]) -> np.ndarray:
        calls.append(list(texts))
        table = {"buy pet": [1.0, 0.0], "take park": [0.6, 0.8]}  # residue cosine 0.6
        return np.array([table[t] for t in texts], dtype=np.float32)

    a, b = _shapes("When did Jolene buy her pet Seraphim?", "When did Jolene take Seraphim to the park?")
    assert not residue_agrees(a, b, embed, 0.73)  # needs 0.63
    assert residue_agrees(a, b, embed, 0.75)  # needs 0.57
    assert calls == [["buy pet", "take park"]] * 2
    a, b = _shapes("What has Kim found?", "What did Kim find out?")
    assert residues(a, b) == ("", "out")  # find/found share a stem: one side empty passes
    assert residue_agrees(a, b, embed, 0.5)
    assert len(calls) == 2  # no embedder call for an empty residue


def test_verdicts_for_several_candidates_take_one_embedder_call() -> None:
    calls: list[list[str]] = []

    def embed(texts: Sequence[str]) -> np.ndarray:
        calls.append(list(texts))
        return load_embedder("hash").embed(texts)

    asked = question_shape("When did Jolene buy her pet Seraphim?")
    pairs = [(asked, question_shape(q), 0.8) for q in (
        "When did Jolene take Seraphim to the park?",
        "When did Jolene buy Seraphim?",  # "pet" only on one side: passes without embedding
        "When did Jolene walk Seraphim at the beach?",
    )]
    verdicts = residue_verdicts(pairs, embed)
    assert verdicts == [False, True, False]
    assert calls == [["buy pet", "take park", "buy pet", "walk beach"]]
    assert residue_verdicts([], embed) == [] and len(calls) == 1


def test_qa_bank_refuses_a_different_question_about_the_same_person_as_residue() -> None:
    bank = QABank(None, load_embedder("hash"), byte_limit=None)
    bank.add("When did Jolene buy her pet Seraphim?", "In May.")
    probe = "When did Jolene take Seraphim to the park?"
    on = bank.lookup(probe, tau=0.3, meaning=WITH_RESIDUE)
    assert on.match is None and on.rejected_by == "residue"
    off = bank.lookup(probe, tau=0.3, meaning=WITHOUT_RESIDUE, audit=True)
    assert off.match is not None
    assert bank.stats()["served_with_guard_off"]["residue"] == 1  # type: ignore[index]


def test_residue_off_and_not_audited_costs_no_embedder_call() -> None:
    embedder, bank, probe, vector = _bank_holding("When did Jolene buy her pet Seraphim?", "In May.")
    off = bank.lookup(probe, tau=0.3, meaning=WITHOUT_RESIDUE, embedding=vector)
    assert off.match is not None
    assert embedder.calls == []  # before: one call for the residues, under the bank's lock
    assert bank.stats()["served_with_guard_off"]["residue"] == 0  # type: ignore[index]
    # On (or audited): one call for the residues of every candidate reaching tau, made
    # while the bank's lock is free.
    embedder.bank = bank
    on = bank.lookup(probe, tau=0.3, meaning=WITH_RESIDUE, embedding=vector)
    assert on.rejected_by == "residue"
    assert embedder.calls == [["take park", "buy pet"]] and embedder.lock_free == [True]
    below = bank.lookup(probe, tau=0.99, meaning=WITH_RESIDUE, embedding=vector)
    assert below.rejected_by == "threshold" and len(embedder.calls) == 1  # below tau: free


def test_residue_embeds_only_for_candidates_passing_every_other_guard() -> None:
    embedder, bank, probe, vector = _bank_holding("When did Jolene not buy her pet Seraphim?",
                                                  "She never did.")
    result = bank.lookup(probe, tau=0.3, meaning=WITH_RESIDUE, embedding=vector)
    assert result.rejected_by == "polarity"
    assert embedder.calls == []  # the residue cannot change the outcome: not computed
    bank.add(probe, "In June.")  # the same question: an empty residue, no call either
    assert bank.lookup(probe, tau=0.3, meaning=WITH_RESIDUE, embedding=vector).match is not None
    assert embedder.calls == [[probe]]  # only add() embedded the new question


def test_a_leading_clause_does_not_set_the_question_type() -> None:
    assert question_kind("When user requirements came up, what did Marketing find out?") == "thing"
    assert question_kind("When is the rehearsal?") == "time"


# With all-MiniLM-L6-v2 (dev pairs: LoCoMo conv-44/47/48 and QMSum val-split paraphrases).
REFUSED = [
    ("Where did Deborah get her cats?", "Where did Deborah get married?"),
    ("When did Andrew and his girlfriend go fishing?",
     "When did Andrew and his girlfriend go on a wine tasting trip?"),
    ("What is something that Audrey often dresses up her dogs with?",
     "What items has Audrey bought or made for her dogs?"),
]
# Refused by a fixed residue threshold of 0.3 (the former rule), served now: reworded with
# words the embedder does not pair well, but the whole questions are very alike.
SERVED = [
    ("What did the team mention about their experiences with remote controls?",
     "What did the team share about how they have used remote controls before?"),
    ("Why did the marketing propose having different colours for the product?",
     "What was Marketing's reason for suggesting the product come in different colours?"),
    ("What policy the government was going to roll out to ease the deficit?",
     "Which policy did the government plan to introduce to reduce the deficit?"),
]


@pytest.mark.parametrize(("stored", "asked"), REFUSED)
def test_minilm_different_questions_about_the_same_thing_are_refused(
        minilm: Embedder, stored: str, asked: str) -> None:
    bank = QABank(None, minilm, byte_limit=None)
    bank.add(stored, "stored answer")
    without = bank.lookup(asked, tau=DEFAULT_TAU, meaning=WITHOUT_RESIDUE)
    assert without.match is not None  # only the residue guard tells them apart
    result = bank.lookup(asked, tau=DEFAULT_TAU, meaning=WITH_RESIDUE)
    assert result.match is None and result.rejected_by == "residue"


@pytest.mark.parametrize(("stored", "asked"), SERVED)
def test_minilm_reworded_paraphrases_pass(minilm: Embedder, stored: str, asked: str) -> None:
    bank = QABank(None, minilm, byte_limit=None)
    bank.add(stored, "stored answer")
    a, b = _shapes(asked, stored)
    ra, rb = residues(a, b)
    sim = float(minilm.embed([asked])[0] @ minilm.embed([stored])[0])
    assert ra and rb and float(minilm.embed([ra])[0] @ minilm.embed([rb])[0]) < 0.3
    assert sim >= DEFAULT_TAU
    result = bank.lookup(asked, tau=DEFAULT_TAU, meaning=WITH_RESIDUE)
    assert result.match is not None and result.match.entry.answer == "stored answer"
