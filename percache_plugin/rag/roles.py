"""The ``roles`` meaning guard: who does what to whom.

Two questions with the same words and the same names can ask opposite things when the names
trade places: "What painting did Evan share with Sam?" / "What painting did Sam share with
Evan?" (all-MiniLM-L6-v2: above 0.95), "When did Dave see Aerosmith perform?" / "When did
Aerosmith see Dave perform?". The key-terms guard sees the same names, the word guards the same
words. :func:`question_roles` gives each name of a question its grammatical slot, read from the
word before it:

``subj``
    after the question's first auxiliary ("did Evan", "has Sam"; a later "have" is a verb), after
    a relative "that"/"who" ("problems that Andrew faces"), or opening the question;
``poss``
    a possessive ("Evan's");
``prep:<word>``
    after a preposition ("with Sam", "to Evan", "for Sam");
``obj``
    after any other word (a verb: "see Aerosmith", "invited Calvin");

an article or a possessive pronoun before the name is skipped ("did the Marketing"); a name
joined to the one before it by "and" ("Evan and Sam") takes that name's slot. A name
here is a run of capitalised words not opening the question, titles and time words ("May",
"Monday") left out.

The guard refuses a pair when two names **exchange** their slots (A holds slot s and B slot t
in one question, A holds t and B holds s in the other, s != t), or when the **subject changes**
between two names both questions hold (A is the subject of one and not of the other, B the
other way round: "What recipe did Evan request from Sam?" / "What recipe did Sam share with
Evan?"). A rewording that moves one name
("did Evan share with Sam" / "was shared by Evan with Sam") or joins two ("How did Calvin meet
Frank?" / "How did Calvin and Frank meet?") passes. It also refuses a "who" question whose
"who" changes from the subject ("Who invited Calvin?") to the object ("Who did Calvin
invite?"), with a name in common. Computed once per question, from the text: no embedder call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

__all__ = ["WHO_OBJECT", "WHO_SUBJECT", "question_roles", "roles_swapped"]

WHO_SUBJECT: Final = "<who:subj>"
"""Pseudo-name for a "who" that is the subject of its question ("Who invited Calvin?")."""
WHO_OBJECT: Final = "<who:obj>"
"""Pseudo-name for a "who" that is the object of its question ("Who did Calvin invite?")."""

_TOKEN = re.compile(r"[A-Za-z0-9]+(?:['’][A-Za-z]+)?")
_AUX = frozenset(
    "did does do is are was were has have had will would can could should shall may might "
    "must am didn't doesn't don't isn't aren't wasn't weren't hasn't haven't won't can't".split()
)
_PREPOSITIONS = frozenset(
    "with to for from by about of at in on against toward towards than like between among "
    "onto into after before behind beside besides near over under without within".split()
)
_NOT_NAMES = frozenset(
    "i hon mr mrs ms dr prof sir dame st january february march april may june july august "
    "september october november december monday tuesday wednesday thursday friday saturday "
    "sunday".split()
)
_WHO = frozenset(("who", "whom"))
_RELATIVE = frozenset(("that", "who"))
_SKIP = frozenset("the a an his her their its our my your".split())


def _is_name(token: str) -> bool:
    base = re.sub(r"['’]s$", "", token)
    return base[:1].isupper() and base.casefold() not in _NOT_NAMES


def question_roles(question: str) -> Mapping[str, str]:
    """Each name of ``question`` (case-folded, several words joined by a space) -> its slot
    (see the module docstring); also ``WHO_SUBJECT`` or ``WHO_OBJECT`` for a "who" question.
    A name met twice keeps its first slot."""
    tokens = _TOKEN.findall(question)
    roles: dict[str, str] = {}
    last_slot: str | None = None
    first_aux = next((k for k, t in enumerate(tokens) if t.casefold() in _AUX), -1)
    i = 0
    while i < len(tokens):
        if i == 0 or not _is_name(tokens[i]):
            i += 1
            continue
        start = i
        while i + 1 < len(tokens) and _is_name(tokens[i + 1]) and not re.search(
                r"['’]s$", tokens[i]):
            i += 1
        name_tokens = tokens[start:i + 1]
        possessive = re.search(r"['’]s$", name_tokens[-1]) is not None
        name = " ".join(re.sub(r"['’]s$", "", t) for t in name_tokens).casefold()
        at = start - 1
        while at > 0 and tokens[at].casefold() in _SKIP:
            at -= 1
        before = tokens[at].casefold()
        if possessive:
            slot = "poss"
        elif before == "and" and last_slot is not None and start >= 2 and _is_name(
                tokens[start - 2]):
            slot = last_slot
        elif at == first_aux or before in _RELATIVE or start == 1:
            slot = "subj"
        elif before in _PREPOSITIONS:
            slot = f"prep:{before}"
        else:
            slot = "obj"
        roles.setdefault(name, slot)
        last_slot = slot
        i += 1
    if len(tokens) > 1 and tokens[0].casefold() in _WHO:
        who = WHO_OBJECT if tokens[1].casefold() in _AUX and _is_name(
            tokens[2] if len(tokens) > 2 else "") else WHO_SUBJECT
        roles[who] = who
    return roles


def roles_swapped(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """Whether two names exchange their slots between ``a`` and ``b`` (from
    :func:`question_roles`), the subject moves from one name to another, or a "who" turns from
    subject to object with a name in common."""
    names = [n for n in a.keys() & b.keys() if not n.startswith("<")]
    for x in names:
        for y in names:
            if x != y and a[x] != a[y] and a[x] == b[y] and a[y] == b[x]:
                return True
            if x != y and a[x] == b[y] == "subj" and "subj" not in (b[x], a[y]):
                return True
    whos = {k for k in a if k.startswith("<")} ^ {k for k in b if k.startswith("<")}
    return whos == {WHO_SUBJECT, WHO_OBJECT} and bool(names)
