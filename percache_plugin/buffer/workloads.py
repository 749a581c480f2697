"""Synthetic replays of the K/V store's access pattern, recorded through a :class:`Tracer`.

They reproduce what the engine does with the store, entry by entry: the planner reads the nodes
of the longest cached chunk prefix, the request then writes the nodes it computed. Entry sizes
are SmolLM2-135M's (30 layers x 2 x 3 K/V heads x 64 dims x fp32 = 46,080 bytes per token).
"""

from __future__ import annotations

import random

from .trace import Tracer

__all__ = ["BYTES_PER_TOKEN", "qmsum_like_trace", "chat_trace"]

BYTES_PER_TOKEN = 30 * 2 * 3 * 64 * 4


def _node(tracer: Tracer, stored: set[str], key: str, tokens: int, cls: str) -> bool:
    """Read ``key`` if stored (True), else write it (False)."""
    size = tokens * BYTES_PER_TOKEN
    if key in stored:
        tracer.record("r", f"kv/{key}", 0, size, cls)
        return True
    tracer.record("w", f"kv/{key}", 0, size, "seq" if cls == "seq" else cls)
    stored.add(key)
    return False


def qmsum_like_trace(tracer: Tracer, *, meetings: int = 4, chunks_per_meeting: int = 40,
                     questions: int = 200, top_k: int = 3, predicted: int = 60,
                     seed: int = 0) -> None:
    """Questions about meetings: a system-prompt node, then ``top_k`` retrieved chunks (Zipf
    popularity within the meeting, kept in retrieval order) as prefix-tree nodes, every
    ``questions // predicted`` questions an idle-time population of a predicted question
    (its nodes written once, declared sequential)."""
    rng = random.Random(seed)
    stored: set[str] = set()
    weights = [1.0 / (r + 1) ** 1.1 for r in range(chunks_per_meeting)]
    every = max(1, questions // max(1, predicted))
    for q in range(questions):
        m = rng.randrange(meetings) if q % 10 else q // 10 % meetings
        picks: list[int] = []
        while len(picks) < top_k:
            c = rng.choices(range(chunks_per_meeting), weights)[0]
            if c not in picks:
                picks.append(c)
        path = "sys"
        reading = _node(tracer, stored, path, 40, "hot")
        for c in picks:
            path = f"{path}-m{m}c{c}"
            tokens = 230
            if reading:
                reading = _node(tracer, stored, path, tokens, "")
            else:
                _node(tracer, stored, path, tokens, "")
        if q % every == every - 1:  # idle-time population: a predicted question's chunks
            pm = rng.randrange(meetings)
            path = "sys"
            for c in rng.sample(range(chunks_per_meeting), top_k):
                path = f"{path}-m{pm}c{c}"
                if path not in stored:
                    _node(tracer, stored, path, 230, "seq")


def chat_trace(tracer: Tracer, *, turns: int = 80, sessions: int = 2, prefix_tokens: int = 300,
               turn_tokens: int = 120, seed: int = 0) -> None:
    """Chat sessions one after another: each request reads the system/persona prefix (declared
    hot) and every earlier turn of the session (a loop that grows by one node per turn), then
    writes the new turn."""
    rng = random.Random(seed)
    stored: set[str] = set()
    for s in range(sessions):
        for t in range(turns):
            _node(tracer, stored, "persona", prefix_tokens, "hot")
            for prev in range(t):
                _node(tracer, stored, f"s{s}t{prev}", turn_tokens, "")
            _node(tracer, stored, f"s{s}t{t}", turn_tokens + rng.randrange(-20, 20), "")
