"""LoCoMo for ``percache bench memory``: turns, questions (stratified, seeded sample), and the
scores (evidence recall@k, answer token F1, "unanswerable" answers, fact matching)."""

from __future__ import annotations

import json
import random
import re
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Conversation", "QAItem", "UNANSWERABLE", "answer_f1", "evidence_recall", "load_conversation",
           "sample_questions", "says_unanswerable"]

UNANSWERABLE = "Not mentioned"
_REFUSALS = ("not mentioned", "no information", "not say", "unknown", "don't know", "do not know",
             "not known", "no mention", "cannot", "can't", "not specified", "not stated")


@dataclass(frozen=True)
class QAItem:
    question: str
    answer: str  # "" for adversarial questions (category 5)
    evidence: tuple[str, ...]
    category: int


@dataclass(frozen=True)
class Conversation:
    """Sessions 1..n of one LoCoMo sample: ``sessions[i]`` is ``(date, [(dia_id, text)])``."""

    sample_id: str
    sessions: list[tuple[str, list[tuple[str, str]]]]
    questions: list[QAItem]
    observations: list[tuple[str, str]]  # (fact, dia_id) of the sessions kept


def load_conversation(path: Path, sample: int, n_sessions: int) -> Conversation:
    if not path.is_file():
        raise FileNotFoundError(f"LoCoMo data not found at {str(path)!r}; pass --data PATH")
    raw = json.loads(path.read_text())[sample]
    conv = raw["conversation"]
    sessions = []
    for k in range(1, n_sessions + 1):
        if f"session_{k}" not in conv:
            break
        turns = [(t["dia_id"], f"{t['speaker']}: {t['text']}") for t in conv[f"session_{k}"]]
        sessions.append((conv.get(f"session_{k}_date_time", ""), turns))
    kept = {d for _, turns in sessions for d, _ in turns}
    questions = [QAItem(q["question"], str(q.get("answer", "")), tuple(q.get("evidence", ())),
                        int(q["category"])) for q in raw["qa"]]
    questions = [q for q in questions if q.evidence and set(q.evidence) <= kept]
    observations = [(fact, dia) for k in range(1, len(sessions) + 1)
                    for facts in raw["observation"].get(f"session_{k}_observation", {}).values()
                    for fact, dia in facts if isinstance(dia, str) and dia in kept]
    return Conversation(str(raw.get("sample_id", sample)), sessions, questions, observations)


def sample_questions(questions: Sequence[QAItem], per_category: int, seed: int) -> list[QAItem]:
    """At most ``per_category`` questions of each category, drawn with ``seed``."""
    rng = random.Random(seed)
    out: list[QAItem] = []
    for cat in sorted({q.category for q in questions}):
        pool = [q for q in questions if q.category == cat]
        out += rng.sample(pool, min(per_category, len(pool)))
    return out


def _tokens(text: str) -> list[str]:
    text = text.lower().translate(str.maketrans("", "", string.punctuation))
    return [w for w in re.sub(r"\b(a|an|the|and)\b", " ", text).split()]


def answer_f1(prediction: str, gold: str) -> float:
    """SQuAD-style token F1 (lower case, no punctuation or articles)."""
    p, g = _tokens(prediction), _tokens(gold)
    common = sum((Counter(p) & Counter(g)).values())
    if not p or not g or not common:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def says_unanswerable(answer: str) -> bool:
    low = answer.lower()
    return any(r in low for r in _REFUSALS)


def evidence_recall(evidence: Sequence[str], retrieved_sources: Sequence[Sequence[str]]) -> float:
    """Share of the evidence dialogue ids among the sources of the retrieved items."""
    got = {d for sources in retrieved_sources for d in sources}
    return sum(e in got for e in evidence) / len(evidence)
