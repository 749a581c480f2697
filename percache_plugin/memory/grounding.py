"""The grounding check of extracted facts: a fact whose content words are mostly absent from
the turn(s) it was extracted from is invented by the model, not read, and is dropped.

Content words (:func:`content_words`) are the normalised words of a fact less a fixed list of
function words, pronouns and frequent verbs (``went``, ``likes``...): what is left are names,
nouns, numbers and other specific words. A content word is found in the source when the source
has the same word, or, for words of at least 4 characters, a word with the same stem
(:func:`word_stem`: ``painting`` / ``painted`` / ``paints``, ``lives`` / ``live``); a longer
word that merely starts like a source word is not found (``Calvinist`` is not in a turn about
``Calvin``). Shorter words must match exactly.
:func:`grounding` is the share found (1.0 for a fact with no content word: there is nothing to
check). ``Config.memory_grounding`` is the least share kept; 0 switches the check off.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..rag.meaning import stem
from .text import normalize

__all__ = ["STOPWORDS", "Grounded", "content_words", "grounding", "word_stem"]

STOPWORDS = frozenset("""
a about above after again against all also am an and any are as at be been before being below
between both but by can could did do does doing down during each few for from further had has
have having he her here hers herself him himself his how i if in into is it its itself just me
more most my myself no nor not now of off on once only or other our ours ourselves out over own
same she should so some such than that the their theirs them themselves then there these they
this those through to too under until up very was we were what when where which while who whom
why will with would you your yours yourself yourselves
user speaker person someone something thing things really very much many lot lots
get gets got getting go goes going went gone make makes made making take takes took taken
like likes liked feel feels felt want wants wanted love loves loved think thinks thought
say says said tell tells told know knows knew see sees saw seen use uses used
enjoy enjoys enjoyed find finds found help helps helped new good great nice one also recently
""".split())


@dataclass(frozen=True)
class Grounded:
    """The share of a fact's content words found in its source, and the words missing."""

    share: float
    missing: tuple[str, ...]


def content_words(text: str) -> list[str]:
    """The content words of ``text``, normalised, in order (repeats kept once)."""
    seen: dict[str, None] = {}
    for word in normalize(text).split():
        if word not in STOPWORDS and (len(word) > 2 or word.isdigit()):
            seen.setdefault(word, None)
    return list(seen)


def word_stem(word: str) -> str:
    """The stem of a normalised word: :func:`~percache_plugin.rag.meaning.stem` applied until
    it changes nothing, at most twice (``paintings`` -> ``painting`` -> ``paint``)."""
    once = stem(word)
    return once if once == word else stem(once)


def _found(word: str, source: set[str], stems: set[str]) -> bool:
    if word in source:
        return True
    return len(word) >= 4 and word_stem(word) in stems


def grounding(fact: str, source: str) -> Grounded:
    """How much of ``fact`` is in ``source`` (see the module docstring)."""
    words = content_words(fact)
    if not words:
        return Grounded(1.0, ())
    src = set(normalize(source).split())
    stems = {word_stem(w) for w in src if len(w) >= 4}
    missing = tuple(w for w in words if not _found(w, src, stems))
    return Grounded(1.0 - len(missing) / len(words), missing)
