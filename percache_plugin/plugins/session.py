"""Built-in session policy: evict the oldest unpinned turns first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..hooks.specs import hookimpl

__all__ = ["OldestTurnsFirst"]


class OldestTurnsFirst:
    """The default ``percache_select_eviction``: oldest unpinned turns until ``need`` is freed."""

    @hookimpl(trylast=True)
    def percache_select_eviction(self, ctx: Any, session: Any, need: int) -> Sequence[int]:
        out, freed = [], 0
        for turn in session.turns:
            if freed >= need:
                break
            if turn.pinned or turn.masked:
                continue
            out.append(turn.turn_id)
            freed += turn.n_tokens
        return out
