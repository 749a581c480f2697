"""LoCoMo helpers of ``percache bench memory``: sampling and scores."""

from __future__ import annotations

import json
from pathlib import Path

from percache_plugin.bench.memory_data import (
    QAItem,
    answer_f1,
    evidence_recall,
    load_conversation,
    sample_questions,
    says_unanswerable,
)


def test_scores() -> None:
    assert answer_f1("The Financial Analyst job", "financial analyst") == 0.8
    assert answer_f1("", "x") == 0.0 and answer_f1("cats", "dogs") == 0.0
    assert says_unanswerable("Not mentioned.") and not says_unanswerable("In May 2023")
    assert evidence_recall(["D1:2", "D1:7"], [["D1:2"], ["D3:1", "D1:9"]]) == 0.5


def test_sample_is_stratified_and_seeded() -> None:
    qs = [QAItem(f"q{i}", "a", ("D1:1",), 1 + i % 3) for i in range(30)]
    a, b = sample_questions(qs, 4, seed=1), sample_questions(qs, 4, seed=1)
    assert a == b and len(a) == 12
    assert sorted(q.category for q in a) == [1] * 4 + [2] * 4 + [3] * 4


def test_load_keeps_questions_and_observations_of_the_replayed_sessions(tmp_path: Path) -> None:
    sample = {
        "sample_id": "x",
        "conversation": {"session_1_date_time": "May", "session_1": [
            {"speaker": "A", "dia_id": "D1:1", "text": "I got a dog."}],
            "session_2": [{"speaker": "B", "dia_id": "D2:1", "text": "Nice."}]},
        "qa": [{"question": "Pet?", "answer": "dog", "evidence": ["D1:1"], "category": 1},
               {"question": "Later?", "answer": "x", "evidence": ["D2:1"], "category": 1}],
        "observation": {"session_1_observation": {"A": [["A has a dog.", "D1:1"]]},
                        "session_2_observation": {"B": [["B is nice.", "D2:1"]]}},
    }
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([sample]))
    conv = load_conversation(path, 0, 1)
    assert conv.sessions == [("May", [("D1:1", "A: I got a dog.")])]
    assert [q.question for q in conv.questions] == ["Pet?"]
    assert conv.observations == [("A has a dog.", "D1:1")]
