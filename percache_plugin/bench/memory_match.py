"""Matching extracted facts to LoCoMo's ``observation`` facts, for ``percache bench memory``.

Two match rules, each with a threshold chosen on conversations other than the held-out one:

- ``cosine``: the embeddings' cosine similarity (the memory index's embedder);
- ``token_f1``: SQuAD-style token F1 of the two texts;
- each also *attributed* (:func:`attributed`): only a fact extracted from the observation's own
  dialogue turn may match it.

Calibration (:func:`calibrate`): on the DEV conversations, each observation is scored against the
dialogue turn it was written from (a positive pair) and against the other turns of its session
(negative pairs); the threshold is the one that best separates the two (Youden's J: the largest
true-positive rate minus false-positive rate). A fact then matches an observation when it is at
least as close to it as a typical source turn is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .memory_data import Conversation, answer_f1

__all__ = ["attributed", "calibrate", "f1_matrix", "match_matrix", "youden_threshold"]


def youden_threshold(pos: Sequence[float], neg: Sequence[float]) -> float:
    """The threshold t maximising P(pos >= t) - P(neg >= t) (the smallest such t)."""
    if not len(pos) or not len(neg):
        raise ValueError("calibration needs positive and negative pairs")
    p, n = np.asarray(pos, dtype=np.float64), np.asarray(neg, dtype=np.float64)
    best, best_j = float(p.min()), -2.0
    for t in np.unique(np.concatenate([p, n])):
        j = float((p >= t).mean() - (n >= t).mean())
        if j > best_j:
            best, best_j = float(t), j
    return best


def f1_matrix(a: Sequence[str], b: Sequence[str]) -> np.ndarray:
    """Token F1 of every pair (rows: ``a``, columns: ``b``)."""
    return np.array([[answer_f1(x, y) for y in b] for x in a], dtype=np.float64).reshape(len(a), len(b))


def match_matrix(sims: np.ndarray, tau: float) -> dict[str, Any]:
    """Precision (extracted facts, rows, matching some reference) and recall (reference facts,
    columns, matched by some extracted fact) at ``sims >= tau``."""
    rows, cols = sims.shape
    if rows == 0 or cols == 0:
        return {"precision": 0.0, "recall": 0.0, "extracted": rows, "reference": cols, "threshold": tau}
    hit = sims >= tau
    return {"precision": float(hit.any(axis=1).mean()), "recall": float(hit.any(axis=0).mean()),
            "extracted": rows, "reference": cols, "threshold": tau}


def attributed(sims: np.ndarray, fact_sources: Sequence[Sequence[str]], obs_turns: Sequence[str]
               ) -> np.ndarray:
    """``sims`` where the fact was extracted from the observation's own dialogue turn, -inf
    elsewhere (the strict rule: a fact about another turn never matches)."""
    same = np.array([[o in src for o in obs_turns] for src in fact_sources], dtype=bool)
    return np.where(same.reshape(sims.shape), sims, -np.inf)


def calibrate(convs: Sequence[Conversation], embed: Callable[[list[str]], np.ndarray]
              ) -> dict[str, Any]:
    """Thresholds for the ``cosine`` and ``token_f1`` rules (see the module docstring)."""
    pos: dict[str, list[float]] = {"cosine": [], "token_f1": []}
    neg: dict[str, list[float]] = {"cosine": [], "token_f1": []}
    for conv in convs:
        for _, turns in conv.sessions:
            ids = [d for d, _ in turns]
            obs = [(o, d) for o, d in conv.observations if d in ids]
            if not obs:
                continue
            texts = [t for _, t in turns]
            cos = embed([o for o, _ in obs]) @ embed(texts).T
            f1 = f1_matrix([o for o, _ in obs], texts)
            for i, (_, d) in enumerate(obs):
                j = ids.index(d)
                for name, m in (("cosine", cos), ("token_f1", f1)):
                    pos[name].append(float(m[i, j]))
                    neg[name] += [float(v) for k, v in enumerate(m[i]) if k != j]
    return {name: youden_threshold(pos[name], neg[name]) for name in pos} | {
        "pairs": {"positive": len(pos["cosine"]), "negative": len(neg["cosine"])}}
