"""Turns that recalled memory facts as text (``memory_recall_mode`` 'text'): a forgotten fact
leaves them in a session held in memory.

Such a turn keeps its ids without the memory block (:attr:`~.state.Turn.bare_ids`); when one of
its facts is forgotten, :func:`without_recalled` makes those its ids (the whole memory block
goes, other facts recalled in the same turn too) and cuts the session's cache at the first such
turn: the K/V from there on held the fact or attended to it, and is computed again from the ids
with the next turn (exact). The saved copy is rewritten by :mod:`.forget_rows`.
"""

from __future__ import annotations

from .evict import compact, turn_spans
from .reply import ChatStats
from .state import Session, cache_tokens, crop_to

__all__ = ["cut_at", "without_recalled", "recalled_positions"]


def cut_at(session: Session, start: int, stats: ChatStats) -> None:
    """Crop the session's cache to its first ``start`` positions; what follows is computed
    again from the ids with the next turn (counted in ``stats.history_recomputed``). Masked
    turns are compacted first: without their slots they would be attended again."""
    if any(t.masked for t in session.turns):
        compact(session)
    stats.history_recomputed += max(0, cache_tokens(session.cache) - max(start, session.turns_start))
    crop_to(session.cache, start)
    session.cropped(start)
    if session.keep is not None:
        session.keep = None if bool(session.keep[:start].all()) else session.keep[:start]
    session.saved_upto = min(session.saved_upto, start)
    session.rewrite = True


def recalled_positions(session: Session, fact_id: str) -> list[int]:
    """Start positions of the session's turns whose user ids hold ``fact_id`` as text."""
    return [pos for pos, t in zip(_starts(session), session.turns, strict=True)
            if t.bare_ids is not None and fact_id in t.fact_ids]


def without_recalled(session: Session, fact_id: str) -> tuple[int, int] | None:
    """Remove the memory block of every turn that recalled ``fact_id`` and cut the cache at the
    first of them (see the module docstring); ``(first changed position, turns rewritten)``, or
    None when no turn recalled it. Masked turns leave first (their slots would otherwise be
    attended again once recomputed), so the first changed position may be one of theirs."""
    positions = recalled_positions(session, fact_id)
    if not positions:
        return None
    first = positions[0]
    masked = [pos for pos, t in zip(_starts(session), session.turns, strict=True) if t.masked]
    if masked:
        first = min(first, masked[0])
        compact(session)
    rewritten = 0
    for turn in session.turns:
        if turn.bare_ids is not None and fact_id in turn.fact_ids:
            turn.user_ids, turn.bare_ids, turn.fact_ids = turn.bare_ids, None, []
            rewritten += 1
    cut_at(session, first, ChatStats())
    return first, rewritten


def _starts(session: Session) -> list[int]:
    """Each turn's start position, in order."""
    return [start for start, _ in turn_spans(session).values()]
