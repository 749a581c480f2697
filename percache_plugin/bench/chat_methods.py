"""The methods ``percache bench chat`` compares: each runs a whole conversation and records, per
turn, time to first token, prompt tokens computed and resident K/V bytes."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from transformers import DynamicCache

from ..decode import run_generate
from ..segments import Prompt, PromptPiece, Segment
from ..session.state import cache_bytes, cache_tokens
from ..stats import GenerationStats

__all__ = ["TurnRow", "plain_conversation", "percache_conversation"]


@dataclass
class TurnRow:
    turn: int
    ttft_s: float
    computed: int
    prompt_tokens: int
    kv_bytes: int
    evicted: int = 0
    kl: float | None = None
    top1: bool | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _kl_top1(got: torch.Tensor, want: torch.Tensor) -> tuple[float, bool]:
    p = torch.log_softmax(want.float(), -1)
    q = torch.log_softmax(got.float(), -1)
    return float((p.exp() * (p - q)).sum()), bool(got.argmax() == want.argmax())


def plain_conversation(pc: Any, messages: Sequence[str], mode: str, budget: int, max_new: int,
                       system: str) -> list[TurnRow]:
    """Plain transformers (percache switched off) on the same per-turn ids as ``pc.chat``:
    ``reprefill`` computes the whole conversation every turn; ``carried`` keeps one
    ``DynamicCache`` across turns; ``window`` keeps the system prompt and the most recent whole
    turns within ``budget`` tokens, and computes the window again whenever it slides."""
    layout = pc.sessions.layout
    head, glue = layout.head(system)
    turns: list[list[int]] = []
    eos = _eos(pc)
    cache = DynamicCache()
    start_turn = 0
    rows = []
    with pc.disabled():
        for i, msg in enumerate(messages):
            user = layout.turn(msg, glue if i == 0 else None)
            if mode == "window":
                while start_turn < len(turns) and sum(len(t) for t in turns[start_turn:]) + len(user) + max_new > budget:
                    start_turn += 1
                    cache = DynamicCache()  # the window slid: its RoPE positions all change
            elif mode == "reprefill":
                cache = DynamicCache()
            ids = head + [t for turn in turns[start_turn:] for t in turn] + user
            served = cache_tokens(cache)
            stats = GenerationStats(prompt_tokens=len(ids))
            prompt = Prompt((PromptPiece(Segment("", "query"), tuple(ids), 0, None),))
            t0 = time.perf_counter()
            gen = run_generate(pc.model, pc.tokenizer, prompt, cache, served, stats,
                               {"max_new_tokens": max_new, "do_sample": False}, t0, None)
            new = list(gen.token_ids)
            reply = new[:-1] if new and new[-1] in eos else new
            turns.append(user + reply)
            kv = cache_bytes(cache)
            if mode == "reprefill":
                cache = DynamicCache()  # nothing is kept between turns
            rows.append(TurnRow(i + 1, stats.ttft_s, stats.tokens_computed, len(ids), kv))
    return rows


def _eos(pc: Any) -> set[int]:
    eos = pc.model.generation_config.eos_token_id
    eos = pc.tokenizer.eos_token_id if eos is None else eos
    return set(eos) if isinstance(eos, list) else {eos}


def percache_conversation(make: Callable[[], Any], messages: Sequence[str], max_new: int, system: str,
                          *, restart_at: int | None = None, quality: bool = False) -> list[TurnRow]:
    """``pc.chat`` over the conversation; ``restart_at``: close the handle before that turn and
    open a new one on the same store; ``quality``: on turns after an eviction, KL and top-1 of the
    first next-token distribution against a full prefill of the ids the turn saw."""
    pc = make()
    pc.sessions.create("bench", system=system)
    rows = []
    approx = False
    for i, msg in enumerate(messages):
        if restart_at is not None and i + 1 == restart_at:
            pc.close()
            pc = make()
        reply = pc.chat(msg, session="bench", max_new_tokens=max_new, do_sample=False)
        s = reply.stats
        row = TurnRow(i + 1, s.ttft_s, s.tokens_computed, s.prompt_tokens, s.kv_bytes, s.turns_evicted)
        approx = approx or s.approximate
        if quality and approx and reply.first_logits is not None:
            session = pc.sessions.get("bench")
            ids = list(session.head_ids)
            for t in session.turns[:-1]:
                if not t.masked:
                    ids += t.ids
            ids += session.turns[-1].user_ids
            with pc.disabled(), torch.inference_mode():
                want = pc.model(torch.tensor([ids])).logits[0, -1]
            row.kl, row.top1 = _kl_top1(reply.first_logits, want)
        rows.append(row)
    pc.close()
    return rows
