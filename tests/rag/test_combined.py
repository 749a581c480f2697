"""The combined guard: one logistic rule over align's word matches, the second worst of them
and the match of what each question asks about."""

from __future__ import annotations

import pytest

from percache_plugin.rag import combined
from percache_plugin.rag.combined import FEATURES, WEIGHTS, Features, combined_verdicts, features
from percache_plugin.rag.embeddings import Embedder
from percache_plugin.rag.guards import DEFAULT_TAU
from percache_plugin.rag.qa_bank import QABank
from tests.rag.word_guards import (
    OTHERS,
    check_counted_without_word_vectors,
    check_embeds_each_question_once,
    check_refused_and_audited,
)
from tests.rag.word_guards import words as _words

WITH_COMBINED = (*OTHERS, "combined")


def test_the_rule_weighs_every_feature_and_a_perfect_match_passes() -> None:
    assert len(WEIGHTS) == len(FEATURES) == len(Features(1, 1, 1, 1).row())
    assert all(w > 0 for w in WEIGHTS)  # each feature: the better the match, the likelier a pass
    assert Features(1.0, 1.0, 1.0, 1.0).passes
    assert not Features(0.5, 0.2, 0.2, 0.2).passes


def test_features_of_a_reworded_and_of_a_different_question() -> None:
    table = {"jolene": [1, 0, 0, 0, 0, 0], "seraphim": [1, 0, 0, 0, 0, 0],
             "buy": [0, 1, 0, 0, 0, 0], "purchase": [0, 1, 0.1, 0, 0, 0]}
    table = {k: [float(x) for x in v] for k, v in table.items()}
    stored = "When did Jolene buy Seraphim?"
    same = features(stored, _words(table, stored), "When did Jolene purchase Seraphim?",
                    _words(table, "When did Jolene purchase Seraphim?"))
    assert same.worst > 0.99 and same.head > 0.99 and same.passes
    other = "When did Jolene walk Seraphim?"  # "walk": no match, and it is what is asked
    diff = features(stored, _words(table, stored), other, _words(table, other))
    assert diff.worst < 0.01 and diff.head < 0.01 and not diff.passes
    assert features(stored, _words(table, stored), stored, _words(table, stored)) == \
        Features(1.0, 1.0, 1.0, 1.0)


def test_the_head_skips_names_and_frame_words_but_not_meet() -> None:
    table = {"x": [1.0, 0.0, 0.0, 0.0]}
    text = "What did Industrial Designer think of plastic when discussing the case?"
    side = combined._side(text, _words(table, text))
    assert side.words[side.head] == "plastic"  # type: ignore[index]
    side = combined._side("When did James meet Samantha?",  # "meet" shares "meeting"'s stem
                          _words(table, "When did James meet Samantha?"))
    assert side.words[side.head] == "meet"  # type: ignore[index]


def test_verdicts_embed_every_distinct_question_once() -> None:
    check_embeds_each_question_once(combined_verdicts)


def test_qa_bank_refuses_a_different_question_as_combined_and_audits_it_when_off() -> None:
    check_refused_and_audited("combined")


def test_an_embedder_without_word_vectors_is_counted_not_guessed() -> None:
    check_counted_without_word_vectors("combined")


# With all-MiniLM-L6-v2, dev pairs (LoCoMo conv-44/47/48, QMSum val split) served by align.
REFUSED = [
    ("What did James and Samantha discover they both enjoy at McGee's bar?",
     "Why did James and Samantha choose an apartment near McGee's bar?"),
    # a long shared clause, what is asked about it differs (QMSum val split)
    ("What was Kirsty Williams' opinion of the decision of not accrediting the University of "
     "South Wales with the ability to deliver teacher training?",
     "Summarize Kirsty Williams' opinion on the current geographic spread of provision when "
     "discussing the decision of not accrediting the University of South Wales with the ability "
     "to deliver teacher training."),
    # the wrong-question hit of bench e2e in ES2004 (test split: known before, not fitted on)
    ("What did Industrial Designer think of the older generation when discussing remote control "
     "style and design optimization?",
     "What did Industrial Designer think of plastic when discussing remote control style and "
     "design optimization?"),
]
# Dev paraphrases (QMSum val split, LoCoMo dev) served by it.
SERVED = [
    ("What did the group think of the wood case when discussing the key remote control concepts?",
     "How did the group feel about a wooden case for the remote?"),
    ("When is Andrew planning to go to the beach with his girlfriend?",
     "When does Andrew plan to take his girlfriend to the beach?"),
]


@pytest.mark.parametrize(("stored", "asked"), REFUSED)
def test_minilm_different_questions_served_by_align_are_refused(
        minilm: Embedder, stored: str, asked: str) -> None:
    bank = QABank(None, minilm, byte_limit=None)
    bank.add(stored, "stored answer")
    assert bank.lookup(asked, tau=DEFAULT_TAU, meaning=(*OTHERS, "align")).match is not None
    result = bank.lookup(asked, tau=DEFAULT_TAU, meaning=WITH_COMBINED)
    assert result.match is None and result.rejected_by == "combined"


@pytest.mark.parametrize(("stored", "asked"), SERVED)
def test_minilm_paraphrases_pass(minilm: Embedder, stored: str, asked: str) -> None:
    bank = QABank(None, minilm, byte_limit=None)
    bank.add(stored, "stored answer")
    result = bank.lookup(asked, tau=DEFAULT_TAU, meaning=WITH_COMBINED)
    assert result.match is not None and result.match.entry.answer == "stored answer"
