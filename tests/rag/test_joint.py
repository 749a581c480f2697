"""The joint guard: one logistic rule over the similarity and combined's word-match features,
used with tau lowered to its floor."""

from __future__ import annotations

from collections.abc import Sequence

from percache_plugin.rag.align import EmbedWords
from percache_plugin.rag.combined import FEATURES as COMBINED_FEATURES
from percache_plugin.rag.embeddings import Embedder
from percache_plugin.rag.joint import FEATURES, FLOOR, WEIGHTS, joint_score, joint_verdicts
from percache_plugin.rag.qa_bank import QABank
from tests.rag.word_guards import (
    OTHERS,
    check_counted_without_word_vectors,
    check_embeds_each_question_once,
    check_refused_and_audited,
)

WITH_JOINT = (*OTHERS, "joint")


def test_the_rule_weighs_the_similarity_and_every_word_feature() -> None:
    assert FEATURES == ("similarity", *COMBINED_FEATURES) and len(WEIGHTS) == len(FEATURES)
    assert all(w > 0 for w in WEIGHTS)
    perfect = (1.0, 1.0, 1.0, 1.0)
    assert joint_score(FLOOR, perfect) >= 0  # every word matched: a hit from the floor up
    loose = (0.8, 0.3, 0.3, 0.5)
    assert joint_score(0.95, loose) >= 0 > joint_score(FLOOR, loose)  # the similarity counts


def test_verdicts_embed_every_distinct_question_once() -> None:
    def verdicts(pairs: Sequence[tuple[str, str]], embed_words: EmbedWords) -> list[bool]:
        return joint_verdicts([(a, b, 0.9) for a, b in pairs], embed_words)

    check_embeds_each_question_once(verdicts)


def test_qa_bank_refuses_a_different_question_as_joint_and_audits_it_when_off() -> None:
    check_refused_and_audited("joint")


def test_an_embedder_without_word_vectors_is_counted_not_guessed() -> None:
    check_counted_without_word_vectors("joint")


def test_minilm_dev_paraphrase_below_074_served_and_dev_negative_refused(
        minilm: Embedder) -> None:
    # dev pairs (QMSum val split, LoCoMo conv-44): a paraphrase at similarity 0.67 that
    # combined never sees (below 0.74), and a same-topic pair combined serves at 0.82
    bank = QABank(None, minilm, byte_limit=None)
    bank.add("What's the decision of remote feature design?", "Keep it simple.")
    bank.add("What inspired James to create his game?", "His love of fantasy novels.")
    hit = bank.lookup("What did they decide about the features of the remote?", tau=FLOOR,
                      meaning=WITH_JOINT)
    assert hit.match is not None and hit.match.entry.answer == "Keep it simple."
    assert hit.match.similarity < 0.74
    probe = "What sparked James' passion for gaming when he was a kid?"
    assert bank.lookup(probe, tau=0.74, meaning=(*OTHERS, "combined")).match is not None
    refused = bank.lookup(probe, tau=FLOOR, meaning=WITH_JOINT)
    assert refused.match is None and refused.rejected_by == "joint"
    assert bank.lookup(probe, tau=FLOOR, meaning=OTHERS).match is not None  # off: served
