"""The WordNet reader: base forms, synsets in sense order, pointers and glosses."""

from __future__ import annotations

from percache_plugin.rag.wordnet import WordNet


def test_base_forms(wn: WordNet) -> None:
    assert wn.lemmas("dogs", "n") == ("dog",)
    assert "mouse" in wn.lemmas("mice", "n")            # exception list
    assert "buy" in wn.lemmas("bought", "v")
    assert wn.lemmas("qwzx", "n") == ()


def test_synsets_pointers_and_glosses(wn: WordNet) -> None:
    dog = wn.synsets("dog", "n")[0]                      # most frequent sense first
    assert "dog" in dog.words and "domestic_dog" in dog.words
    assert any("canine" in h.words for h in wn.related(dog, "@"))
    assert "domesticated" in dog.gloss or "wolf" in dog.gloss
    assert wn.synset(dog.key) is dog                     # read once, kept
    assert wn.synsets("dog") and not wn.synsets("qwzx")
