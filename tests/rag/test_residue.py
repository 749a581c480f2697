"""The residue guard: what two questions do not share must mean the same."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from percache_plugin.rag.embeddings import load_embedder
from percache_plugin.rag.meaning import question_kind, question_shape
from percache_plugin.rag.qa_bank import QABank
from percache_plugin.rag.residue import RESIDUE_MIN, residue_agrees, residues


def _shapes(a: str, b: str):  # type: ignore[no-untyped-def]
    return question_shape(a), question_shape(b)


def test_residues_leave_out_shared_names_and_frame_words() -> None:
    a, b = _shapes("When did Jolene buy her pet Seraphim?", "When did Jolene take Seraphim to the park?")
    assert residues(a, b) == ("buy pet", "take park")
    a, b = _shapes("What did D say about the setup?", "What was D's opinion of the setup?")
    assert residues(a, b) == ("", "")  # say / opinion are question-frame words


def test_unrelated_residues_are_refused_and_synonyms_pass() -> None:
    calls: list[list[str]] = []

    def embed(texts: Sequence[str]) -> np.ndarray:
        calls.append(list(texts))
        table = {"buy pet": [1.0, 0.0], "take park": [0.0, 1.0]}  # unrelated
        return np.array([table[t] for t in texts], dtype=np.float32)

    a, b = _shapes("When did Jolene buy her pet Seraphim?", "When did Jolene take Seraphim to the park?")
    assert not residue_agrees(a, b, embed)
    assert calls == [["buy pet", "take park"]]
    a, b = _shapes("What has Kim found?", "What did Kim find out?")
    assert residues(a, b) == ("", "out")  # find/found share a stem: one side empty passes
    assert residue_agrees(a, b, embed)
    assert RESIDUE_MIN == 0.3


def test_qa_bank_refuses_a_different_question_about_the_same_person_as_residue() -> None:
    bank = QABank(None, load_embedder("hash"), byte_limit=None)
    bank.add("When did Jolene buy her pet Seraphim?", "In May.")
    probe = "When did Jolene take Seraphim to the park?"
    on = bank.lookup(probe, tau=0.3, meaning=("polarity", "antonym", "qtype", "object", "residue"))
    assert on.match is None and on.rejected_by == "residue"
    off = bank.lookup(probe, tau=0.3)  # the default: residue is off
    assert off.match is not None
    assert bank.stats()["served_with_guard_off"]["residue"] == 1  # type: ignore[index]


def test_a_leading_clause_does_not_set_the_question_type() -> None:
    assert question_kind("When user requirements came up, what did Marketing find out?") == "thing"
    assert question_kind("When is the rehearsal?") == "time"
