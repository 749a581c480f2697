"""The replay phase of ``percache bench memory``: each LoCoMo session's first speaker talks to
the assistant through ``pc.chat`` (so the recall path, facts of earlier sessions put before the
message, is what runs and is timed), then the session's dialogue turns are queued for idle-time
extraction and an idle phase runs: once as raw turns, once with the model.

The dataset's own turns, both speakers', are what memory is built from (the generated replies
are not LoCoMo's, so they are not extracted); the chat only measures recall during the replay.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..handle import PerCache
from ..memory.idle import queue_turns
from ..memory.text import CONTEXT
from .common import median
from .memory_data import Conversation

__all__ = ["FACT_SCOPES", "chat_turns", "replay"]

FACT_SCOPES = ("raw", "facts", "facts_text_keys", "both")


def chat_turns(turns: Sequence[tuple[str, str]]) -> list[str]:
    """The messages of a session's first speaker, without the ``speaker:`` prefix."""
    if not turns:
        return []
    first = turns[0][1].split(":", 1)[0]
    return [text.split(":", 1)[1].strip() for _, text in turns if text.split(":", 1)[0] == first]


def _chat(pc: PerCache, messages: list[str], max_new: int, out: dict[str, list[float]]) -> None:
    for message in messages:
        t0 = time.perf_counter()
        reply = pc.chat(message, memory_scope="facts", max_new_tokens=max_new, do_sample=False)
        out["latency_s"].append(time.perf_counter() - t0)
        out["facts"].append(len(reply.stats.fact_ids))
        out["memory_tokens"].append(reply.stats.memory_tokens)


def replay(pc: PerCache, conv: Conversation, batch: int, chat_new: int) -> dict[str, Any]:
    """Replay ``conv`` (see the module docstring); returns the extraction and chat figures.
    ``chat_new`` 0 skips the chat."""
    model_s = 0.0
    chats: dict[str, list[float]] = {"latency_s": [], "facts": [], "memory_tokens": []}
    for date, turns in conv.sessions:
        if chat_new:
            pc.configure(memory_recall=True, memory_extraction="off")
            _chat(pc, chat_turns(turns), chat_new, chats)
            pc.configure(memory_recall=False)
        dated = [(d, f"[{date}] {text}") for d, text in turns]
        pc.configure(memory_extraction="raw")
        queue_turns(pc.idle_queue, "c", dated, "raw")
        pc.idle()
        pc.configure(memory_extraction="model")
        for i in range(0, len(turns), batch):  # undated: a fact's date is its session's
            queue_turns(pc.idle_queue, "c", turns[i:i + batch], "facts")
        t0 = time.perf_counter()
        pc.idle()
        model_s += time.perf_counter() - t0
        print(f"  session {date}: {len(turns)} turns, {len(pc.memory.list('facts'))} facts so far",
              flush=True)
    for scope in ("raw", "facts"):
        for fact in pc.memory.list(scope):
            pc.memory.add(fact.text, "both", fact.metadata)
    for fact in pc.memory.list("facts"):  # the same facts indexed by their own text only
        pc.memory.add(fact.text, "facts_text_keys", {k: v for k, v in fact.metadata.items() if k != CONTEXT})
    stats = pc.memory.extraction
    facts = len(pc.memory.list("facts"))
    chat = {"turns": len(chats["latency_s"]), "max_new": chat_new,
            "latency_s_median": median(chats["latency_s"]) if chats["latency_s"] else None,
            "facts_recalled_mean": float(np.mean(chats["facts"])) if chats["facts"] else None,
            "memory_tokens_mean": float(np.mean(chats["memory_tokens"])) if chats["facts"] else None,
            "turns_with_facts": sum(n > 0 for n in chats["facts"])}
    return {"turns": sum(len(t) for _, t in conv.sessions), "model_calls": stats.model_calls,
            "facts": facts, "malformed_lines": stats.malformed, "ungrounded": stats.ungrounded,
            "duplicates": stats.duplicates, "superseded": stats.superseded, "idle_s_model": model_s,
            "facts_per_minute": facts / (model_s / 60) if model_s else 0.0,
            "raw_items": len(pc.memory.list("raw")), "both_items": len(pc.memory.list("both")),
            "chat": chat}
