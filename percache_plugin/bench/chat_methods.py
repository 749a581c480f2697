"""The methods ``percache bench chat`` compares, as arms stepped one turn at a time (so every
method's turn ``t`` is measured within seconds of the others', under the same machine load).

* :class:`CarriedArm`: plain transformers with one ``DynamicCache`` carried across turns; its
  conversation (the ids of every turn and reply) is the reference the sampled methods replay.
* :func:`prefill_row`: re-prefill (the whole conversation computed) or a sliding window (the
  system prompt and the most recent whole turns within the budget, computed again because
  its RoPE positions changed when it slid), measured at sampled turns on the reference ids:
  both are full prefills whose cost depends only on the ids, and prefilling a long
  conversation at every turn is what makes a 60-turn run slow.
* :class:`PercacheArm`: ``pc.chat`` on a session under the budget, one eviction mode.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from transformers import DynamicCache

from ..decode import run_generate
from ..segments import Prompt, PromptPiece, Segment
from ..session.layout import ChatLayout
from ..session.state import cache_bytes, cache_tokens
from ..stats import GenerationStats

__all__ = ["TurnRow", "CarriedArm", "PercacheArm", "prefill_row", "window_ids", "kl_top1"]


@dataclass
class TurnRow:
    turn: int
    ttft_s: float | None  # None: not measured at this turn (sampled methods)
    computed: int
    prompt_tokens: int
    kv_bytes: int
    evicted: int = 0
    recomputed: int = 0
    kl: float | None = None
    top1: bool | None = None
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def kl_top1(got: torch.Tensor, want: torch.Tensor) -> tuple[float, bool]:
    """KL(want || got) of the next-token distributions and whether their argmax agree."""
    p = torch.log_softmax(want.float(), -1)
    q = torch.log_softmax(got.float(), -1)
    return float((p.exp() * (p - q)).sum()), bool(got.argmax() == want.argmax())


def _eos(model: Any, tokenizer: Any) -> set[int]:
    eos = model.generation_config.eos_token_id
    eos = tokenizer.eos_token_id if eos is None else eos
    return set(eos) if isinstance(eos, list) else {eos}


def _generate(model: Any, tok: Any, ids: list[int], cache: Any, max_new: int) -> tuple[list[int], GenerationStats]:
    stats = GenerationStats(prompt_tokens=len(ids))
    prompt = Prompt((PromptPiece(Segment("", "query"), tuple(ids), 0, None),))
    gen = run_generate(model, tok, prompt, cache, cache_tokens(cache), stats,
                       {"max_new_tokens": max_new, "do_sample": False}, time.perf_counter(), None)
    return list(gen.token_ids), stats


class CarriedArm:
    """transformers' ``DynamicCache`` carried from turn to turn (``model`` never enabled)."""

    def __init__(self, model: Any, tok: Any, layout: ChatLayout, system: str, max_new: int) -> None:
        self.model, self.tok, self.layout, self.max_new = model, tok, layout, max_new
        self.head, self.glue = layout.head(system)
        self.turns: list[list[int]] = []  # user + reply ids of every turn so far
        self.user: list[int] = []  # the last turn's user ids
        self.cache = DynamicCache()
        self.eos = _eos(model, tok)

    def conversation(self) -> list[int]:
        return self.head + [t for turn in self.turns for t in turn]

    def step(self, message: str) -> TurnRow:
        self.user = self.layout.turn(message, self.glue if not self.turns else None)
        ids = self.conversation() + self.user
        with torch.inference_mode():
            new, stats = _generate(self.model, self.tok, ids, self.cache, self.max_new)
        reply = new[:-1] if new and new[-1] in self.eos else new
        self.turns.append(self.user + reply)
        return TurnRow(len(self.turns), stats.ttft_s, stats.tokens_computed, len(ids), cache_bytes(self.cache))


def window_ids(head: list[int], turns: Sequence[list[int]], user: list[int], budget: int,
               max_new: int) -> tuple[list[int], int]:
    """The sliding window's prompt (head, the most recent whole earlier turns that fit
    ``budget`` with the new turn and its reply) and the index of its first turn."""
    start = len(turns)
    used = len(user) + max_new
    while start > 0 and used + len(turns[start - 1]) <= budget:
        start -= 1
        used += len(turns[start])
    return head + [t for turn in turns[start:] for t in turn] + user, start


def prefill_row(model: Any, tok: Any, turn: int, ids: list[int], note: str) -> TurnRow:
    """TTFT of computing ``ids`` from nothing (one new token), and its resident K/V."""
    cache = DynamicCache()
    with torch.inference_mode():
        _, stats = _generate(model, tok, ids, cache, 1)
    return TurnRow(turn, stats.ttft_s, stats.tokens_computed, len(ids), cache_bytes(cache), note=note)


class PercacheArm:
    """``pc.chat`` on one session; ``make()`` opens a handle (on the arm's own model)."""

    def __init__(self, make: Any, system: str, max_new: int, *, quality: bool = False,
                 resume: bool = False) -> None:
        self.make, self.system, self.max_new, self.quality = make, system, max_new, quality
        self.pc = make()
        if not resume:  # resume: the session is in the handle's store
            self.pc.sessions.create("bench", system=system)
        self.approx = False

    def step(self, message: str, *, measure_quality: bool = False) -> TurnRow:
        reply = self.pc.chat(message, session="bench", max_new_tokens=self.max_new, do_sample=False)
        s = reply.stats
        row = TurnRow(s.turn_id, s.ttft_s, s.tokens_computed, s.prompt_tokens, s.kv_bytes,
                      s.turns_evicted, s.history_recomputed, note=s.restored_from)
        self.approx = self.approx or s.approximate
        if self.quality and measure_quality and self.approx and reply.first_logits is not None:
            # Against a full prefill of what the session still attends to (masked turns left out).
            session = self.pc.sessions.get("bench")
            ids = list(session.head_ids)
            for t in session.turns[:-1]:
                if not t.masked:
                    ids += t.ids
            ids += session.turns[-1].user_ids
            with self.pc.disabled(), torch.inference_mode():
                want = self.pc.model(torch.tensor([ids])).logits[0, -1]
            row.kl, row.top1 = kl_top1(reply.first_logits, want)
        return row

    def close(self) -> None:
        self.pc.close()
