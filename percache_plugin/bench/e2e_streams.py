"""Query streams of ``percache bench e2e``: a user's questions as asked, or with earlier
questions coming back reworded.

- ``original``: the user's questions in order.
- ``paraphrase``: the same questions in order, with hand-written rewordings of some earlier
  questions inserted after them, so that about :data:`REPEAT_RATE` of the stream's queries are
  an earlier question asked again in other words (the rate semantic-cache studies observe in
  single-user traffic). The rewordings come from ``benchmarks/data`` (written by hand, never
  generated); the reference answer of a rewording is its original question's.

The choice of repeated questions and where they come back is seeded by the user id, so a
stream is the same in every run and for every method.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .e2e_users import Question, User

__all__ = [
    "STREAMS",
    "REPEAT_RATE",
    "PARAPHRASE_FILES",
    "Paraphrases",
    "load_paraphrases",
    "repeats_for",
    "paraphrase_stream",
    "stream_user",
    "has_paraphrases",
    "repeat_share",
]

STREAMS: tuple[str, ...] = ("original", "paraphrase")
REPEAT_RATE = 0.3
"""Share of a paraphrase stream's queries that are an earlier question reworded."""

_DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
PARAPHRASE_FILES: tuple[Path, ...] = (
    _DATA / "qa_paraphrases.json", _DATA / "qa_paraphrases_dev.json", _DATA / "e2e_paraphrases.json")
"""The hand-written rewordings of QMSum queries (``{"pairs": [{meeting, query, paraphrase}]}``)."""

Paraphrases = Mapping[tuple[str, str], tuple[str, ...]]
"""``(meeting id, query text) -> rewordings``."""


def load_paraphrases(paths: Iterable[Path] = PARAPHRASE_FILES) -> dict[tuple[str, str], tuple[str, ...]]:
    """Every rewording in ``paths``, by ``(meeting, query)``; a missing file raises
    FileNotFoundError naming it (the files live in the source tree's ``benchmarks/data``)."""
    out: dict[tuple[str, str], list[str]] = {}
    for path in paths:
        if not path.is_file():
            raise FileNotFoundError(f"paraphrase file {path} not found: the paraphrase stream reads "
                                    "the hand-written rewordings in the source tree's benchmarks/data")
        for pair in json.loads(path.read_text())["pairs"]:
            texts = out.setdefault((pair["meeting"], pair["query"]), [])
            if pair["paraphrase"] not in texts:
                texts.append(pair["paraphrase"])
    return {k: tuple(v) for k, v in out.items()}


def repeats_for(n_questions: int, rate: float = REPEAT_RATE) -> int:
    """How many rewordings make ``rate`` of a stream of ``n_questions`` originals plus them
    (4 questions at 0.3: 2 rewordings, 2 of 6 queries)."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"repeat rate must be in [0, 1), got {rate}")
    return round(n_questions * rate / (1.0 - rate))


def _candidates(user: User, paraphrases: Paraphrases) -> list[int]:
    return [i for i, q in enumerate(user.questions) if paraphrases.get((q.meeting, q.text))]


def has_paraphrases(user: User, paraphrases: Paraphrases, rate: float = REPEAT_RATE) -> bool:
    """Whether enough of ``user``'s questions have rewordings for a stream at ``rate``."""
    return len(_candidates(user, paraphrases)) >= repeats_for(len(user.questions), rate)


def paraphrase_stream(user: User, paraphrases: Paraphrases, *, rate: float = REPEAT_RATE,
                      seed: int = 0) -> tuple[Question, ...]:
    """``user``'s questions in order with rewordings of earlier ones inserted (see the module
    doc). Each rewording's ``repeat_of`` is the stream index of the question it rewords, which
    always comes before it. Raises ValueError when fewer of the user's questions have a
    rewording than the rate needs."""
    want = repeats_for(len(user.questions), rate)
    candidates = _candidates(user, paraphrases)
    if len(candidates) < want:
        raise ValueError(f"user {user.id}: {len(candidates)} of its {len(user.questions)} questions "
                         f"have a hand-written rewording, the paraphrase stream needs {want} "
                         "(choose other --series or add rewordings to benchmarks/data)")
    rng = random.Random(f"{seed}:{user.id}")
    stream: list[tuple[int, Question]] = list(enumerate(user.questions))  # (original index, q)
    for i in sorted(rng.sample(candidates, want)):
        q = user.questions[i]
        text = rng.choice(paraphrases[q.meeting, q.text])
        after = next(k for k, (j, _) in enumerate(stream) if j == i)
        pos = rng.randint(after + 1, len(stream))
        stream.insert(pos, (i, dataclasses.replace(q, text=text, original=q.text)))
    out: list[Question] = []
    index_of: dict[int, int] = {}
    for k, (i, q) in enumerate(stream):
        if q.original is None:
            index_of[i] = k
            out.append(q)
        else:
            out.append(dataclasses.replace(q, repeat_of=index_of[i]))
    return tuple(out)


def stream_user(user: User, stream: str, paraphrases: Paraphrases | None = None, *,
                rate: float = REPEAT_RATE, seed: int = 0) -> User:
    """``user`` with the questions of ``stream`` (one of :data:`STREAMS`)."""
    if stream == "original":
        return user
    if stream == "paraphrase":
        return dataclasses.replace(user, questions=paraphrase_stream(
            user, paraphrases if paraphrases is not None else load_paraphrases(), rate=rate,
            seed=seed))
    raise ValueError(f"unknown stream {stream!r}; known: {', '.join(STREAMS)}")


def repeat_share(questions: Sequence[Question]) -> float:
    """Share of ``questions`` that reword an earlier one."""
    return sum(q.repeat_of is not None for q in questions) / len(questions) if questions else 0.0
