"""Two checks of the ``lexical`` guard on where words stand, not which words they are.

- :func:`crossed`: two noun phrases trade places around a word both questions keep ("What did
  the team think of Marketing's proposal?" / "What did Marketing think of the team's
  proposal?"; "What does Evan's wife think of his family?" / "... his family think of his
  wife?"). The ``roles`` guard sees only names in grammatical slots; here any content word
  counts, but only a clean exchange: the content words read ``P X M Y S`` in one question and
  ``P Y M X S`` in the other, every other word in place. A clause moved to the front ("When
  discussing X, what did Y think of Z?") or a passive is not such an exchange.
- :func:`asked_attribute`: the thing asked for is an attribute of :data:`ATTRIBUTES` that the
  other question does not name ("What kind of car does Evan drive?" / "What color is the car
  Evan drives?"): the two share every other word, so no swap between them is found.

Both came from already-seen pairs (``benchmarks/data/qa_fresh4_heldout.json``, the roles and
attribute negatives it still served with ``joint`` and ``lexical``).
"""

from __future__ import annotations

from typing import Final

from percache_plugin.rag.meaning import FUNCTION_STEMS, QuestionShape, stem

__all__ = ["ATTRIBUTES", "asked_attribute", "crossed"]

ATTRIBUTES: Final = frozenset(stem(w) for w in (
    "color colour size price cost age name weight height length width brand model shape "
    "material breed title address number amount population speed").split())
"""Nouns that ask for one attribute of a thing (stems, :func:`~percache_plugin.rag.meaning.stem`)."""
_OPENERS: Final = frozenset(("what", "which"))


def crossed(a: QuestionShape, b: QuestionShape) -> tuple[str, str] | None:
    """The two phrases (first word of each, as written in ``a``) that trade places around a
    shared middle: ``a``'s content words read ``P X M Y S`` and ``b``'s ``P Y M X S`` (``M``
    not empty, ``X`` != ``Y``); else None."""
    ca = [(s, w) for s, w in zip(a.words, a.surface, strict=True) if s not in FUNCTION_STEMS]
    x = [s for s, _ in ca]
    y = [s for s in b.words if s not in FUNCTION_STEMS]
    if len(x) != len(y) or sorted(x) == x == y:
        return None
    head = 0
    while head < len(x) and x[head] == y[head]:
        head += 1
    tail = 0
    while tail < len(x) - head and x[-1 - tail] == y[-1 - tail]:
        tail += 1
    mid_x, mid_y = x[head: len(x) - tail], y[head: len(y) - tail]
    n = len(mid_x)
    for lx in range(1, n - 1):
        for ly in range(1, n - lx):
            first, middle, last = mid_x[:lx], mid_x[lx: n - ly], mid_x[n - ly:]
            if first != last and mid_y == last + middle + first:
                return ca[head][1], ca[head + n - ly][1]
    return None


def asked_attribute(a: QuestionShape, b: QuestionShape) -> str | None:
    """The attribute ``a`` asks for ("what color", "what is the price") when ``b`` does not
    name it (the lexical guard also asks WordNet whether a word of ``b`` stands for it), else
    None. ``a``'s asked word is its first content word after an opening "what"
    or "which"."""
    if not a.surface or a.surface[0] not in _OPENERS:
        return None
    asked = next((s for s in a.words[1:] if s not in FUNCTION_STEMS), None)
    if asked is None or asked not in ATTRIBUTES or asked in b.words:
        return None
    return a.surface[a.words.index(asked)]
