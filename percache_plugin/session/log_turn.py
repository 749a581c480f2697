"""A chat turn appended to the turn log (memory level L3), after the session saved it."""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING

from ..turnlog import TurnLog, TurnRecord, context_hash
from .reply import Reply
from .state import Session

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["log_turn"]

log = logging.getLogger("percache")


def log_turn(turn_log: TurnLog, engine: Engine, session: Session, reply: Reply) -> TurnRecord | None:
    """Append the session's last turn to ``turn_log`` and call ``percache_turn_logged``; best
    effort like the session's save: a failed write counts in ``stats.store_errors``."""
    turn = session.turns[-1]
    history = [(t.message, t.reply_text) for t in session.turns[:-1] if not t.masked]
    stats = reply.stats
    try:
        record = turn_log.append(
            session=session.name, turn_id=turn.turn_id, fingerprint=engine.fingerprint,
            persona=stats.persona or None, system=session.system, history=history, message=turn.message,
            output=turn.reply_text, context_hash=context_hash(reply.prompt_ids),
            prompt_tokens=len(reply.prompt_ids), fact_ids=stats.fact_ids,
            latency_s=stats.total_s, ttft_s=stats.ttft_s)
    except sqlite3.Error as exc:
        stats.store_errors += 1
        log.warning("percache: could not log turn %d of session %r: %s", turn.turn_id, session.name, exc)
        return None
    stats.log_id = record.log_id
    failed = engine.hooks.turn_logged(engine.ctx, record)
    stats.plugin_errors += failed  # an observer: logged, the reply is kept
    engine.stats().plugin_errors += failed
    return record
