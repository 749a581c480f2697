"""Query streams of ``percache bench e2e``: the paraphrase stream's rate, order and determinism."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from percache_plugin.bench.e2e_streams import (
    PARAPHRASE_FILES,
    has_paraphrases,
    load_paraphrases,
    paraphrase_stream,
    repeat_share,
    repeats_for,
    stream_user,
)
from percache_plugin.bench.e2e_users import Question, User


def _user(n: int = 4, uid: str = "ES9001") -> User:
    qs = tuple(Question(f"question {i}?", f"answer {i}", "m1") for i in range(n))
    return User(uid, "AMI", (), qs)


def _para(user: User, *which: int) -> dict[tuple[str, str], tuple[str, ...]]:
    return {(q.meeting, q.text): (f"reworded {i} a", f"reworded {i} b")
            for i, q in enumerate(user.questions) if i in which}


def test_repeat_count_gives_about_thirty_percent() -> None:
    assert repeats_for(4) == 2 and repeats_for(3) == 1 and repeats_for(10) == 4
    for n in range(3, 30):
        assert 0.2 <= repeats_for(n) / (n + repeats_for(n)) <= 0.4
    assert repeats_for(4, 0.0) == 0
    with pytest.raises(ValueError, match="repeat rate"):
        repeats_for(4, 1.0)


def test_every_repeat_rewords_an_earlier_question() -> None:
    for uid in ("ES9001", "Bed", "covid", "x"):
        user = _user(uid=uid)
        stream = paraphrase_stream(user, _para(user, 0, 1, 2, 3))
        assert len(stream) == 6 and repeat_share(stream) == pytest.approx(2 / 6)
        originals = [q for q in stream if q.repeat_of is None]
        assert originals == list(user.questions)  # all questions, in order, unchanged
        for k, q in enumerate(stream):
            if q.repeat_of is None:
                continue
            earlier = stream[q.repeat_of]
            assert q.repeat_of < k and earlier.repeat_of is None
            assert q.original == earlier.text and q.text != earlier.text
            assert q.text.startswith("reworded") and q.answer == earlier.answer  # its reference
        repeated = [q.repeat_of for q in stream if q.repeat_of is not None]
        assert len(set(repeated)) == len(repeated)  # two different questions come back


def test_stream_is_deterministic_and_seeded() -> None:
    user = _user(8)
    para = _para(user, *range(8))
    first = paraphrase_stream(user, para)
    assert paraphrase_stream(user, para) == first
    others = {paraphrase_stream(user, para, seed=s) for s in range(1, 8)}
    assert len(others | {first}) > 1  # the seed moves the choice
    assert paraphrase_stream(_user(8, "other"), para) != first  # and so does the user


def test_only_questions_with_rewordings_come_back() -> None:
    user = _user()
    stream = paraphrase_stream(user, _para(user, 1, 3))
    assert sorted(stream[q.repeat_of].text for q in stream if q.repeat_of is not None) == [
        "question 1?", "question 3?"]
    assert has_paraphrases(user, _para(user, 1, 3)) and not has_paraphrases(user, _para(user, 2))
    with pytest.raises(ValueError, match="1 of its 4 questions"):
        paraphrase_stream(user, _para(user, 2))


def test_stream_user() -> None:
    user = _user()
    assert stream_user(user, "original") is user
    para = stream_user(user, "paraphrase", _para(user, 0, 1))
    assert para.id == user.id and len(para.questions) == 6
    with pytest.raises(ValueError, match="unknown stream"):
        stream_user(user, "nope")


def test_load_paraphrases(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"pairs": [
        {"meeting": "m", "query": "q", "paraphrase": "a"},
        {"meeting": "m", "query": "q", "paraphrase": "b"},
        {"meeting": "m", "query": "q", "paraphrase": "a"}]}))
    assert load_paraphrases([path]) == {("m", "q"): ("a", "b")}
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        load_paraphrases([tmp_path / "nowhere.json"])


def test_shipped_rewordings_cover_the_default_users() -> None:
    """The hand-written files load and hold the rewordings the default QMSum users need."""
    para = load_paraphrases(PARAPHRASE_FILES)
    assert len(para) > 100
    assert all(t and all(isinstance(x, str) and x for x in t) for t in para.values())
