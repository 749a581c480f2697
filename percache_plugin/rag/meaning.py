"""What a question asks, beyond its topic: polarity, opposite words and the question type.

Embeddings place a question and its opposite side by side (all-MiniLM-L6-v2: "Was the
meeting cancelled?" / "Was the meeting not cancelled?" 0.99; "open" / "close" 0.91), and two
different questions about the same person and thing close together ("Did she make the
bowl?" / "What is her bowl a reminder of?" 0.77). :func:`question_shape` extracts, once per
question, what the QA bank's meaning guards compare (see :func:`meaning_checks`):

``polarity``
    the number of negations (not, n't, never, no, nothing, nobody, none, neither, nor,
    without) is odd in one question and even in the other, unless the other says the
    negated word's prefixed negation instead ("didn't agree" / "disagree": this passes
    ``polarity`` and ``antonym``).
``antonym``
    one question has a word and the other its opposite but not the word itself: a pair of
    ``antonyms.ANTONYM_PAIRS`` (or of ``antonyms.CONVERSE_PAIRS`` with the other content
    words in the same order: give / receive), or a word and its prefixed negation (like / dislike,
    able / unable, possible / impossible), or "least" said by one question only (not "at
    least"): "favorite" / "least favorite".
``qtype``
    the questions ask for different kinds of answer: time (when, what year...), place,
    person, reason, number, duration, yes/no, or a thing ("what", "which", a request).
    "what"/"how" questions are compatible with one another and with reasons (the
    importance of X / why X is important), a yes/no question only with a yes/no question.
``object``
    the two questions are the same sentence but for one or two content words on each side,
    in a noun's slot (after an article or possessive, or before a shared content word): a
    swap of the event or object ("the budget meeting" / "the design meeting").
``roles``
    two names trade their grammatical slots ("did Evan share with Sam" / "did Sam share with
    Evan"), or a "who" turns from subject to object: see :mod:`percache_plugin.rag.roles`.
``residue`` (off by default)
    the content words one question has and the other lacks must mean the same (an embedding
    check, see :mod:`percache_plugin.rag.residue`; run by the QA bank, not here).
``align`` (off by default)
    every content word of each question must find a match in the other, by the embedder's
    contextual word vectors (see :mod:`percache_plugin.rag.align`; run by the QA bank, not
    here).
``combined`` (off by default)
    one logistic rule over align's word matches, the second worst of them and the match of
    what each question asks about (see :mod:`percache_plugin.rag.combined`; run by the QA
    bank, not here).
``joint`` (off by default)
    one logistic rule over the similarity and combined's features, used with tau lowered to
    its floor (see :mod:`percache_plugin.rag.joint`; run by the QA bank, not here).
``lexical`` (off by default)
    no word of one question is swapped for a word of the other that WordNet does not relate
    to it as the same (a synonym, derivation, ...): "favorite food" / "favorite drink" (see
    :mod:`percache_plugin.rag.lexical`; needs the ``wordnet`` extra; run by the QA bank, not
    here).
``words`` (off by default)
    the content words (cut to 5 letters) of the two questions overlap by at least
    ``WORDS_MIN_JACCARD`` (Jaccard): a different question about the same person and thing
    shares the name and the thing but little else.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from percache_plugin.rag.antonyms import ANTONYM_PAIRS, CONVERSE_PAIRS
from percache_plugin.rag.roles import question_roles, roles_swapped

__all__ = ["DEFAULT_MEANING_GUARDS", "FUNCTION_STEMS", "MEANING_GUARDS", "WORDS_MIN_JACCARD", "QuestionShape", "meaning_checks", "negated_form", "question_shape", "stem"]

MEANING_GUARDS: Final = (
    "polarity", "antonym", "qtype", "object", "roles", "residue", "align", "combined", "joint",
    "lexical", "words",
)
DEFAULT_MEANING_GUARDS: Final = frozenset(("polarity", "antonym", "qtype", "object", "roles"))
WORDS_MIN_JACCARD: Final = 0.25
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NEGATIONS = frozenset("not never no nothing nobody none neither nor without cannot".split())
_CONTRACTED = re.compile(r"n't\b")
_IRREGULAR = {
    "began": "begin", "begun": "begin", "sold": "sell", "bought": "buy", "won": "win",
    "lost": "lose", "rose": "rise", "fell": "fall", "fallen": "fall", "gave": "give",
    "given": "give", "took": "take", "taken": "take", "came": "come", "went": "go",
    "gone": "go", "shut": "shut", "left": "leave", "forgot": "forget", "forgotten": "forget",
    "found": "find", "sent": "send", "lent": "lend", "hated": "hate", "closed": "close",
    "taught": "teach", "learnt": "learn",
}
# Stems of words that carry no content of their own (question words, auxiliaries, pronouns,
# articles, prepositions, requests).
_FUNCTION = frozenset(
    "what which who whom whose when where why how many much long is are was were be been "
    "being am do does did done doing have has had having can could will would shall should "
    "may might must the a an of to in on at for from by with about as into onto over under "
    "and or but if then than that this these those there here it its he she they them their "
    "his her him hers we us our you your i me my mine any anyone some someone something "
    "anything one ever also just still yet so very too please tell give show let know "
    "again really s".split()
)
_TIME_WORDS = r"time|year|date|day|month|week|hour"
_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (kind, re.compile(pattern)) for kind, pattern in (
        ("number", r"^how (many|much)\b|^what (number|amount|percentage)\b|"
                   r"^what (is|was|are|were) the (price|cost|amount|number|total)\b"),
        ("duration", r"^how long\b|^for how long\b"),
        ("time", rf"^when\b|^(what|which) ({_TIME_WORDS})s?\b|^at what time\b|^since when\b"),
        ("place", r"^where\b|^(what|which) (place|city|country|town)\b|^in (what|which) "
                  r"(place|city|country|town)\b"),
        ("person", r"^who(m|se)?\b|^(what|which) (person|people)\b"),
        ("reason", r"^why\b|^(what|which) (is|was|were|are) the reasons?\b|^for what reason\b|"
                   r"^how come\b"),
        ("manner", r"^how\b"),
        ("yesno", r"^(is|are|was|were|do|does|did|has|have|had|can|could|will|would|should|"
                  r"shall|may|might|must|am|isn't|aren't|wasn't|weren't|don't|doesn't|"
                  r"didn't|hasn't|haven't|won't|can't|cannot)\b"),
    )
)
_REQUEST = re.compile(
    r"^(?:(?:can|could|would|will) you (?:please )?|please )?(?:tell|show|give|remind) "
    r"(?:me|us)(?: (?:again|please))?(?: about)? ?|^(?:can|could|would|will) you (?:please )?"
    r"(?=summari[sz]e|recap|explain|describe|list|outline|remind)|^do you (?:know|remember) |"
    r"^i (?:want|would like|need) to know |^i wonder |^any idea "
)
_LEAD_CLAUSE = re.compile(r"^(?:when|while|during|after|before|in|with|as|at)\b[^,?]*,\s*")
_MAIN_START = re.compile(r"^(?:what|which|who|whom|whose|when|where|why|how|is|are|was|were|do|"
                         r"does|did|has|have|had|can|could|will|would)\b")
# Question types that may be answered by one answer: what/how/which overlap with each other
# and with reasons; every other type only with itself.
_COMPATIBLE = frozenset({("manner", "thing"), ("reason", "thing"), ("manner", "reason")})


def stem(word: str) -> str:
    """A crude, consistent stem: close/closed/closes/closing -> "clos", cancelled -> "cancel"."""
    word = _IRREGULAR.get(word, word)
    for suffix in ("ing", "ed", "es", "s", "e"):
        if word.endswith("ss") and suffix in ("s", "e"):
            break
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "aeiousz":
        word = word[:-1]
    return word


def _opposites(pairs: tuple[tuple[str, str], ...]) -> dict[str, frozenset[str]]:
    table: dict[str, set[str]] = {}
    for a, b in pairs:
        sa, sb = stem(a), stem(b)
        table.setdefault(sa, set()).add(sb)
        table.setdefault(sb, set()).add(sa)
    return {k: frozenset(v) for k, v in table.items()}


_OPPOSITE: Final = _opposites(ANTONYM_PAIRS)
_CONVERSE: Final = _opposites(CONVERSE_PAIRS)
_DETERMINERS = frozenset("the a an my your his her their our its this that these those".split())
_PREFIXES = ("un", "dis", "in", "im", "non", "ir", "il")


@dataclass(frozen=True)
class QuestionShape:
    """``negated``: an odd number of negations; ``kind``: the question type; ``words``: the
    stems in order (function words included, for the object swap); ``content``: the content
    stems; ``surface``: the words as written, one per stem of ``words``; ``roles``: each name's
    grammatical slot (:func:`~percache_plugin.rag.roles.question_roles`)."""

    negated: bool
    kind: str
    words: tuple[str, ...]
    content: frozenset[str]
    surface: tuple[str, ...] = ()
    roles: tuple[tuple[str, str], ...] = ()


def question_kind(text: str) -> str:
    """The kind of answer a question asks for (see the module docstring)."""
    text = _REQUEST.sub("", text.strip().lower().replace("’", "'"))
    text = re.sub(r"^(?:and|so|but|ok|okay|hey|also|then)\b[, ]*", "", text)
    clause = _LEAD_CLAUSE.match(text)  # "When X came up, what did Y find?": the main clause
    if clause and _MAIN_START.match(text[clause.end():]):
        text = text[clause.end():]
    for kind, pattern in _KINDS:
        if pattern.search(text):
            return kind
    return "thing"


def question_shape(question: str) -> QuestionShape:
    text = question.lower().replace("’", "'")
    tokens = _WORD.findall(_CONTRACTED.sub(" not", text))
    negations = sum(t in _NEGATIONS for t in tokens)
    surface = tuple(t.split("'")[0] for t in tokens if t not in _NEGATIONS)
    words = tuple(stem(t) for t in surface)
    content = frozenset(w for w in words if w not in _FUNCTION_STEMS)
    roles = tuple(sorted(question_roles(question).items()))
    return QuestionShape(negations % 2 == 1, question_kind(question), words, content, surface,
                         roles)


_FUNCTION_STEMS: Final = frozenset(stem(w) for w in _FUNCTION)
FUNCTION_STEMS: Final = _FUNCTION_STEMS
"""Stems of words that carry no content of their own (question words, auxiliaries, ...)."""


def negated_form(a: str, b: str) -> bool:
    """Whether one word is the other with a negating prefix ("agree" / "disagree")."""
    return any(b == p + a or a == p + b for p in _PREFIXES)


def _least(shape: QuestionShape) -> bool:
    """Whether the question says "least" (not "at least"): "least favorite" flips "favorite"."""
    return any(w == "least" and (i == 0 or shape.words[i - 1] != "at")
               for i, w in enumerate(shape.words))


def _opposed(a: QuestionShape, b: QuestionShape) -> bool:
    if _least(a) != _least(b):
        return True
    only_a, only_b = set(a.words) - set(b.words), set(b.words) - set(a.words)
    for w in only_a:
        if _OPPOSITE.get(w, frozenset()) & only_b or any(negated_form(w, v) for v in only_b):
            return True
        if _CONVERSE.get(w, frozenset()) & only_b and _same_order(a, b):
            return True
    return False


def _same_order(a: QuestionShape, b: QuestionShape) -> bool:
    """Whether the content words both questions hold once each come in the same order (a
    converse verb with the people in place: another question; with them swapped: the same)."""
    shared = {w for w in a.content & b.content if a.words.count(w) == b.words.count(w) == 1}
    return [w for w in a.words if w in shared] == [w for w in b.words if w in shared]


def _swapped(a: QuestionShape, b: QuestionShape) -> bool:
    """The same sentence but for one or two words on each side, content words, in a noun's
    slot: after an article or possessive, or before a shared word ("budget meeting")."""
    x, y = a.words, b.words
    head = 0
    while head < min(len(x), len(y)) and x[head] == y[head]:
        head += 1
    tail = 0
    while tail < min(len(x), len(y)) - head and x[-1 - tail] == y[-1 - tail]:
        tail += 1
    mid_x, mid_y = x[head : len(x) - tail], y[head : len(y) - tail]
    if not (1 <= len(mid_x) <= 2 and 1 <= len(mid_y) <= 2):
        return False
    if not (set(mid_x) & a.content and set(mid_y) & b.content):
        return False
    after_article = head > 0 and x[head - 1] in _DETERMINERS
    before_shared = tail > 0 and x[len(x) - tail] in a.content
    return after_article or before_shared


def _negation_reworded(a: QuestionShape, b: QuestionShape) -> bool:
    """One question negates a word and the other says its prefixed negation instead ("Why
    didn't D agree with M?" / "Why did D disagree with M?"): the same meaning, although the
    polarity and antonym checks each see a difference."""
    if a.negated == b.negated:
        return False
    neg, pos = (a, b) if a.negated else (b, a)
    only_neg, only_pos = set(neg.words) - set(pos.words), set(pos.words) - set(neg.words)
    return any(p + w in only_pos for w in only_neg for p in _PREFIXES)


def meaning_checks(a: QuestionShape, b: QuestionShape,
                   enabled: Collection[str] = DEFAULT_MEANING_GUARDS) -> dict[str, bool]:
    """Each enabled meaning guard -> whether the two questions pass it (ask the same)."""
    out: dict[str, bool] = {}
    reworded = _negation_reworded(a, b)
    if "polarity" in enabled:
        out["polarity"] = a.negated == b.negated or reworded
    if "antonym" in enabled:
        out["antonym"] = reworded or not _opposed(a, b)
    if "qtype" in enabled:
        pair = tuple(sorted((a.kind, b.kind)))
        out["qtype"] = a.kind == b.kind or pair in _COMPATIBLE
    if "object" in enabled:
        out["object"] = not _swapped(a, b)
    if "roles" in enabled:
        out["roles"] = not roles_swapped(dict(a.roles), dict(b.roles))
    if "words" in enabled:
        x, y = {w[:5] for w in a.content}, {w[:5] for w in b.content}
        out["words"] = not (x | y) or len(x & y) / len(x | y) >= WORDS_MIN_JACCARD
    return out
