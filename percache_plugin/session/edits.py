"""Cache edits on a session: keep the conversation's ids and the keep-mask in step with the slots."""

from __future__ import annotations

from typing import Any

from ..kv.edit import CacheEditor
from .state import Session

__all__ = ["session_editor", "drop_positions"]


def drop_positions(session: Session, positions: list[int]) -> None:
    """Remove the ids at conversation ``positions`` (sorted) from the session's turns; a turn
    left empty goes. The persistent head cannot lose positions.

    :raises ValueError: a position in the head."""
    head = session.turns_start
    if positions and positions[0] < head:
        raise ValueError(f"position {positions[0]} is in the persistent head or memory region "
                         f"({head} tokens): not deletable")
    gone = set(positions)
    start = head
    for turn in session.turns:
        n_user, n_reply = len(turn.user_ids), len(turn.reply_ids)
        turn.drop_user({i for i in range(n_user) if start + i in gone})
        turn.reply_ids = [t for i, t in enumerate(turn.reply_ids) if start + n_user + i not in gone]
        start += n_user + n_reply
    session.turns = [t for t in session.turns if t.n_tokens]
    if session.keep is not None:
        import torch

        mask = torch.ones(session.keep.numel(), dtype=torch.bool)
        mask[[p for p in positions if p < session.keep.numel()]] = False
        session.keep = session.keep[mask.to(session.keep.device)]


def session_editor(session: Session, shifter: Any, shift_reason: str = "") -> CacheEditor:
    """An editor over the session's cache whose deletions also leave the conversation."""
    return CacheEditor(session.cache, shifter, lambda gone: drop_positions(session, gone),
                       shift_reason=shift_reason)
