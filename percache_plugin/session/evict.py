"""Keeping a session under its token budget: whole turns leave, in one of three modes.

``exact``: the evicted turns leave the conversation, the cache is cropped before the first of
them, and every later position is recomputed with the next turn (equal to a fresh prefill of
what remains). Eviction goes down to ``session_low_water`` of the budget so this is amortised.
``shifted``: their slots are deleted and later keys RoPE-shifted back by the gap (approximate:
later turns still carry what they attended to); ``session_recompute_head`` first tokens of the
new oldest turn can be recomputed. Turns that recalled memory facts as text leave exactly
(``stats.fallback`` says so), so no K/V that attended to a fact outlives the turn that held it. ``masked``: the slots stay, excluded from attention through
the mask hook (approximate in the same way, no memory saved until :func:`compact`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from ..cache_arg import cache_kw
from ..decode import context_limit
from .edits import session_editor
from .reply import ChatStats
from .state import Session, Turn, cache_tokens, crop_to

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["make_room", "compact", "masked_keep", "turn_spans"]


def turn_spans(session: Session) -> dict[int, tuple[int, int]]:
    """Conversation span ``[start, end)`` of every turn in context, by turn id."""
    out, pos = {}, session.turns_start
    for t in session.turns:
        out[t.turn_id] = (pos, pos + t.n_tokens)
        pos += t.n_tokens
    return out


def masked_keep(session: Session) -> torch.Tensor:
    """The keep-vector of a session restored with masked turns (False over their slots)."""
    keep = torch.ones(session.saved_upto, dtype=torch.bool)
    for t in session.turns:
        if t.masked:
            start, end = turn_spans(session)[t.turn_id]
            keep[start:end] = False
    return keep


def make_room(engine: Engine, session: Session, incoming: int, message: str, stats: ChatStats,
              start: int | None = None) -> None:
    """Evict turns so that ``incoming`` more tokens (the new turn and its reply) fit the budget,
    and the model's context after ``start`` (where the turns start once the turn's memory region
    is set; None: where they start now) and the turns eviction cannot take (pinned, masked)."""
    config = engine.config
    mode = config.session_eviction
    _leave_other_modes(session, mode, stats)
    budget = config.session_kv_tokens
    room = None if budget is None else _context_room(engine, session, start)
    if budget is not None and room is not None and room < budget:  # a budget over the context
        if mode == "masked" and session.ephemeral_tokens + incoming > room:
            # masked slots keep their positions: only turns that leave make room in the context
            compact(session, stats)
            stats.fallback = "masked eviction frees no position: evicted exactly to fit the model's context"
            mode, room = "exact", _context_room(engine, session, start)
        budget = min(budget, max(0, room if room is not None else budget))
    if budget is None or session.ephemeral_tokens + incoming <= budget:
        return
    target = min(int(budget * config.session_low_water), budget - incoming)
    need = session.ephemeral_tokens - max(target, 0)
    if mode == "masked":
        chosen = _least_relevant(engine, session, need, message)
    else:
        chosen = engine.hooks.select_eviction(engine.ctx, session, need) or []
    evictable = {t.turn_id for t in session.turns if not t.pinned and not t.masked}
    victims = [t for t in session.turns if t.turn_id in set(chosen) & evictable]
    if not victims:
        return
    first = min(turn_spans(session)[t.turn_id][0] for t in victims)
    stats.turns_evicted = len(victims)
    stats.tokens_evicted = sum(t.n_tokens for t in victims)
    stats.eviction = mode
    if mode == "masked" and not engine.capabilities.attention_hook:
        stats.fallback = (f"masked eviction unavailable ({engine.capabilities.reasons.get('attention_hook', '')}); "
                          "evicted exactly")
        mode = "exact"
    if mode == "shifted" and engine.shifter is None:
        stats.fallback = f"shifted eviction unavailable ({engine.capabilities.reasons.get('shifted_reuse', '')}); evicted exactly"
        mode = "exact"
    if mode == "shifted" and any(t.fact_ids for t in victims):
        # later turns would keep K/V that attended to the recalled facts, with no turn left to
        # say so: forgetting one of them could not find it (session/recalled.py)
        stats.fallback = "a turn with recalled memory facts is evicted exactly"
        mode = "exact"
    if mode == "exact":
        _drop_exact(session, victims, stats)
    elif mode == "shifted":
        _drop_shifted(engine, session, victims, stats)
    else:
        _mask(session, victims, stats)
    session.evicted_turns += len(victims)
    session.rewrite = True  # turn rows change; slots change from the first evicted turn on
    if mode != "masked":
        session.saved_upto = min(session.saved_upto, first)


def _context_room(engine: Engine, session: Session, start: int | None) -> int | None:
    """Positions the model's context leaves for the turns eviction can take (None: no known
    context): after the head and memory region (from ``start`` when the turn sets a region)
    and the pinned and masked turns."""
    limit = context_limit(engine.model)
    if limit is None:
        return None
    fixed = sum(t.n_tokens for t in session.turns if t.pinned or t.masked)
    return limit - fixed - (session.turns_start if start is None else start)


def _leave_other_modes(session: Session, mode: str, stats: ChatStats) -> None:
    """What an inexact mode left when another mode is configured now (``configure()`` between
    turns): masked turns leave exactly, and K/V that 'shifted' eviction RoPE-shifted is cropped
    and computed again with this turn. So switching to 'exact' makes the next turn exact."""
    if mode != "masked" and any(t.masked for t in session.turns):
        compact(session, stats)
    start = session.shifted_from
    if mode != "shifted" and start is not None:
        stats.history_recomputed += max(0, cache_tokens(session.cache) - start)
        crop_to(session.cache, start)
        session.cropped(start)
        session.keep = None if session.keep is None else session.keep[:start]
        session.saved_upto, session.rewrite = min(session.saved_upto, start), True


def _drop_exact(session: Session, victims: list[Turn], stats: ChatStats) -> None:
    spans = turn_spans(session)
    first = min(spans[t.turn_id][0] for t in victims)
    gone = {t.turn_id for t in victims}
    session.turns = [t for t in session.turns if t.turn_id not in gone]
    crop_to(session.cache, first)
    session.cropped(first)
    session.keep = None if session.keep is None else session.keep[:first]
    # the next save rewrites the turn rows and the slots from ``first`` on (compact() too)
    session.saved_upto, session.rewrite = min(session.saved_upto, first), True
    stats.history_recomputed += max(0, session.n_tokens - first)


def _drop_shifted(engine: Engine, session: Session, victims: list[Turn], stats: ChatStats) -> None:
    editor = session_editor(session, engine.shifter)
    spans = turn_spans(session)
    first = min(spans[t.turn_id][0] for t in victims)
    for t in sorted(victims, key=lambda t: -spans[t.turn_id][0]):  # newest first: spans stay valid
        start, end = spans[t.turn_id]
        n = editor.n_slots
        if end > n:  # the turn's tail is not cached: crop there and let the next turn compute it
            crop_to(session.cache, min(start, n))
            session.cropped(min(start, n))
            session.turns = [x for x in session.turns if x.turn_id != t.turn_id]
            stats.history_recomputed += max(0, session.n_tokens - min(start, n))
            continue
        editor.evict(start, end)
    stats.approximate = True
    n = cache_tokens(session.cache)
    k = min(engine.config.session_recompute_head, max(0, n - first))
    if k:
        _recompute(engine, session, first, k)
        stats.history_recomputed += k
    stats.tokens_shifted = max(0, n - first - k)
    if stats.tokens_shifted:
        session.approximate_from(first + k)
        at = first + k  # shifted K/V from here on; an earlier eviction's may start before
        session.shifted_from = at if session.shifted_from is None else min(session.shifted_from, at)


def _recompute(engine: Engine, session: Session, start: int, k: int) -> None:
    """Compute positions ``[start, start + k)`` again (exact given what precedes them) and put
    the shifted K/V after them back."""
    cache = session.cache
    saved = [(lay.keys[..., start + k:, :], lay.values[..., start + k:, :]) for lay in cache.layers]
    crop_to(cache, start)
    ids = torch.tensor([session.ids[start:start + k]], device=next(engine.model.parameters()).device)
    with torch.inference_mode():
        engine.model(input_ids=ids, **cache_kw(cache), use_cache=True)
    for lay, (k_saved, v_saved) in zip(cache.layers, saved, strict=True):
        lay.keys = torch.cat([lay.keys, k_saved], dim=-2)
        lay.values = torch.cat([lay.values, v_saved], dim=-2)


def _least_relevant(engine: Engine, session: Session, need: int, message: str) -> list[int]:
    live = [t for t in session.turns if not t.pinned and not t.masked][:-1]  # keep the newest
    scored = sorted(live, key=lambda t: (engine.hooks.turn_relevance(engine.ctx, session, t, message),
                                         t.turn_id))
    out, freed = [], 0
    for t in scored:
        if freed >= need:
            break
        out.append(t.turn_id)
        freed += t.n_tokens
    return out


def _mask(session: Session, victims: list[Turn], stats: ChatStats) -> None:
    spans = turn_spans(session)
    n = cache_tokens(session.cache)
    keep = session.keep if session.keep is not None else torch.ones(n, dtype=torch.bool)
    for t in victims:
        start, end = spans[t.turn_id]
        keep[start:min(end, n)] = False
        t.masked = True
    session.keep = keep
    session.approximate_from(n)  # later positions are computed without the masked turns
    stats.approximate = True


def compact(session: Session, stats: Any = None) -> int:
    """Turn masked turns into real evictions (exact: later turns are recomputed next turn);
    returns the tokens freed."""
    masked = [t for t in session.turns if t.masked]
    if not masked:
        return 0
    from .reply import ChatStats as _Stats

    freed = sum(t.n_tokens for t in masked)
    _drop_exact(session, masked, stats if stats is not None else _Stats())
    return freed
