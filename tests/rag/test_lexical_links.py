"""What the lexical guard counts as the same word beyond WordNet's links."""

from __future__ import annotations

from percache_plugin.rag.lexical import relation
from percache_plugin.rag.lexical_links import (
    EQUIVALENTS,
    PREPOSITION_CONTRASTS,
    equivalent,
    phrasal_verbs,
)
from percache_plugin.rag.wordnet import WordNet


def test_equivalents_match_any_inflection(wn: WordNet) -> None:
    assert equivalent(wn, "issues", "problem")
    assert equivalent(wn, "biggest", "main")        # through WordNet's exception list
    assert not equivalent(wn, "issues", "crowd")
    assert not equivalent(wn, "zzyzx", "zzyzx")     # unknown words are in no group
    assert relation(wn, "problems", "issues") == "same"


def test_equivalent_groups_do_not_overlap_a_contrast() -> None:
    words = {w for g in EQUIVALENTS for w in g}
    assert all(len(g) >= 2 for g in EQUIVALENTS)
    assert not words & {w for pair in PREPOSITION_CONTRASTS for w in pair}


def test_phrasal_verbs_are_wordnet_multiword_verbs(wn: WordNet) -> None:
    found = phrasal_verbs(wn, "which hobby did sam take up in may".split())
    assert found == {"take": ("take_up",), "up": ("take_up",)}
    assert "come_out" in phrasal_verbs(wn, "when did the album come out".split())["out"]
    assert phrasal_verbs(wn, "where did they end up".split())["end"] == (
        "end_up",)
    assert phrasal_verbs(wn, "what did sam take in may".split()) == {}
    # a particle after a word WordNet has no such verb for is nothing
    assert phrasal_verbs(wn, "what did the cat up".split()) == {}
