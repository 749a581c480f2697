"""Matching extracted facts to LoCoMo observations: thresholds chosen on DEV pairs."""

from __future__ import annotations

import numpy as np
import pytest

from percache_plugin.bench.memory_data import Conversation
from percache_plugin.bench.memory_match import (
    attributed,
    calibrate,
    f1_matrix,
    match_matrix,
    youden_threshold,
)


def test_youden_threshold_separates_positive_from_negative_pairs() -> None:
    assert youden_threshold([0.8, 0.9, 0.7], [0.1, 0.3, 0.75]) == 0.8 or \
        youden_threshold([0.8, 0.9, 0.7], [0.1, 0.3, 0.75]) == 0.7
    assert youden_threshold([0.9, 0.8], [0.1, 0.2]) == 0.8
    with pytest.raises(ValueError, match="positive and negative"):
        youden_threshold([], [0.1])


def test_match_matrix_precision_over_rows_recall_over_columns() -> None:
    sims = np.array([[0.9, 0.1, 0.0], [0.2, 0.1, 0.3]])
    m = match_matrix(sims, 0.5)
    assert m["precision"] == 0.5 and m["recall"] == pytest.approx(1 / 3)
    assert match_matrix(np.zeros((0, 3)), 0.5)["recall"] == 0.0
    f1 = f1_matrix(["Ana has a dog", "Ben"], ["Ana has a dog.", "Ben sings"])
    assert f1[0, 0] == 1.0 and f1[1, 0] == 0.0 and f1[1, 1] == pytest.approx(2 / 3)


def test_calibrate_scores_each_observation_against_its_own_turn() -> None:
    conv = Conversation("x", [("May", [("D1:1", "A: I got a dog named Rex"), ("D1:2", "B: I sing in a choir"),
                                        ("D1:3", "A: hello there")])], [],
                        [("A got a dog named Rex", "D1:1"), ("B sings in a choir", "D1:2")])

    def embed(texts: list[str]) -> np.ndarray:
        vocab = sorted({w for t in ["A: I got a dog named Rex", "B: I sing in a choir", "A: hello there",
                                    "A got a dog named Rex", "B sings in a choir"] for w in t.split()})
        m = np.array([[float(w in t.split()) for w in vocab] for t in texts])
        return m / np.linalg.norm(m, axis=1, keepdims=True)

    t = calibrate([conv], embed)
    assert t["pairs"] == {"positive": 2, "negative": 4}
    assert 0.0 < t["token_f1"] <= 0.8 and 0.0 < t["cosine"] <= 0.9


def test_attributed_matches_only_facts_of_the_observations_own_turn() -> None:
    sims = np.array([[0.9, 0.9], [0.9, 0.9]])
    strict = attributed(sims, [["D1:1"], ["D1:3", "D1:2"]], ["D1:2", "D1:1"])
    m = match_matrix(strict, 0.5)
    assert strict[0, 1] == 0.9 and strict[0, 0] == -np.inf and strict[1, 0] == 0.9
    assert m["precision"] == 1.0 and m["recall"] == 1.0
    assert match_matrix(attributed(sims, [["D9:9"], []], ["D1:2", "D1:1"]), 0.5)["recall"] == 0.0
