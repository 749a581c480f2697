"""The align guard: every content word of each question must find its match in the other, by
the embedder's contextual word vectors."""

from __future__ import annotations

import numpy as np
import pytest

from percache_plugin.rag.align import Alignment, align_verdicts, alignment
from percache_plugin.rag.embeddings import Embedder, HashEmbedder, question_words
from percache_plugin.rag.guards import DEFAULT_TAU
from percache_plugin.rag.qa_bank import QABank
from tests.rag.word_guards import (
    OTHERS,
    check_counted_without_word_vectors,
    check_embeds_each_question_once,
    check_refused_and_audited,
)
from tests.rag.word_guards import words as _words

WITH_ALIGN = (*OTHERS, "align")


def test_question_words_drop_possessives_and_keep_spans() -> None:
    assert question_words("What's Audrey’s dog's name?") == [
        ("what", 0, 6), ("audrey", 7, 15), ("dog", 16, 21), ("name", 22, 26)]


def test_a_reworded_question_passes_and_an_unmatched_leftover_word_fails() -> None:
    # Two directions: 0 for names and shared words, 1 for "buy"/"purchase" (synonyms).
    table = {"jolene": [1, 0, 0, 0], "seraphim": [1, 0, 0, 0], "buy": [0, 1, 0, 0],
             "purchase": [0, 1, 0.1, 0], "bought": [0, 1, 0, 0]}
    table = {k: [float(x) for x in v] for k, v in table.items()}
    stored = _words(table, "When did Jolene buy Seraphim?")
    paraphrase = _words(table, "When did Jolene purchase Seraphim?")
    other = _words(table, "When did Jolene walk Seraphim?")  # "walk": no match in the other
    same = alignment(stored, paraphrase)
    assert same.residue_min > 0.99 and same.passes
    different = alignment(stored, other)
    assert different.residue_min < 0.01 and not different.passes
    assert alignment(stored, stored) == Alignment(1.0, 1.0)


def test_questions_without_content_words_pass() -> None:
    table = {"x": [1.0, 0.0, 0.0]}
    assert alignment(_words(table, "What is it?"), _words(table, "Jolene?")) == Alignment(1.0, 1.0)


def test_verdicts_embed_every_distinct_question_once() -> None:
    check_embeds_each_question_once(align_verdicts)


def test_hash_word_vectors_are_one_unit_vector_per_word_without_context() -> None:
    words, vectors = HashEmbedder(64).embed_words(["Did Kim see Kim?"])[0]
    assert words == ("did", "kim", "see", "kim")
    assert vectors.shape == (4, 64)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert np.array_equal(vectors[1], vectors[3])
    assert HashEmbedder(64).embed_words(["?"])[0][1].shape == (0, 64)


def test_qa_bank_refuses_a_different_question_as_align_and_audits_it_when_off() -> None:
    check_refused_and_audited("align")


def test_an_embedder_without_word_vectors_is_counted_not_guessed() -> None:
    check_counted_without_word_vectors("align")


# With all-MiniLM-L6-v2. Dev pairs (LoCoMo conv-44/47/48, QMSum val-split paraphrases).
# Served by the default guards and by the residue guard (a leftover word was a frame word or
# one side had none), refused by align: what one question asks has no match in the other.
REFUSED = [
    ("What has Andrew done with his dogs?",
     "What can Andrew potentially do to improve his stress and accomodate his living situation "
     "with his dogs?"),
    ("What does Andrew view his pets as?",
     "What challenge is Andrew facing in their search for a pet?"),
]
# Refused by the residue guard (leftover words embedded out of context do not pair), served
# by align: in context each reworded word finds its match.
SERVED = [
    ("What was the controversy about China hoarding PPE amid the pandemic?",
     "What was the row about China stockpiling PPE during the pandemic?"),
    ("What did the group think of the wood case when discussing the key remote control concepts?",
     "How did the group feel about a wooden case for the remote?"),
]


def test_minilm_word_vectors_are_contextual(minilm: Embedder) -> None:
    (wa, va), (wb, vb) = minilm.embed_words(  # type: ignore[attr-defined]
        ["Did the bank close?", "Did she sit on the river bank?"])
    assert wa == ("did", "the", "bank", "close") and len(vb) == len(wb) == 7
    assert np.allclose(np.linalg.norm(va, axis=1), 1.0, atol=1e-5)
    assert float(va[2] @ vb[6]) < 0.95  # "bank" in two contexts: two vectors


@pytest.mark.parametrize(("stored", "asked"), REFUSED)
def test_minilm_different_questions_passing_residue_are_refused(
        minilm: Embedder, stored: str, asked: str) -> None:
    bank = QABank(None, minilm, byte_limit=None)
    bank.add(stored, "stored answer")
    assert bank.lookup(asked, tau=DEFAULT_TAU, meaning=(*OTHERS, "residue")).match is not None
    result = bank.lookup(asked, tau=DEFAULT_TAU, meaning=WITH_ALIGN)
    assert result.match is None and result.rejected_by == "align"


@pytest.mark.parametrize(("stored", "asked"), SERVED)
def test_minilm_reworded_paraphrases_refused_by_residue_pass(
        minilm: Embedder, stored: str, asked: str) -> None:
    bank = QABank(None, minilm, byte_limit=None)
    bank.add(stored, "stored answer")
    assert bank.lookup(asked, tau=DEFAULT_TAU, meaning=(*OTHERS, "residue")).rejected_by == "residue"
    result = bank.lookup(asked, tau=DEFAULT_TAU, meaning=WITH_ALIGN)
    assert result.match is not None and result.match.entry.answer == "stored answer"
