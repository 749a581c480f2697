"""What memory drew from a deleted session (used by ``pc.memory.forget_session`` and by
``percache store remove --session``, which has no model): its turns queued for extraction,
the facts whose sources are all its turns, and the history events of its re-adds of facts
stated elsewhere too."""

from __future__ import annotations

from ..idle import IdleQueue
from .bank import MemoryBank
from .fusion import sources
from .idle import EXTRACT_KIND, extraction_session

__all__ = ["drawn_only_from", "drop_queued_turns", "drop_readded_from"]


def _only_from(session: str, source_ids: list[str]) -> bool:
    return all(s.rpartition(":")[0] == session for s in source_ids)


def drop_queued_turns(queue: IdleQueue, session: str) -> int:
    """Drop the session's turns queued for extraction, then checkpoint the queue's database so
    no old WAL frame keeps their text; returns how many."""
    dropped = queue.drop(EXTRACT_KIND, lambda question, _scope: extraction_session(question) != session)
    queue.scrub()
    return dropped


def drawn_only_from(bank: MemoryBank, session: str) -> list[str]:
    """The ids of the facts, active or superseded, whose sources (counting those it was added
    again from) are all turns of ``session``: they go with it. A fact with a source in another
    session, or none (added by hand), stays."""
    gone = []
    for fact in (f for scope in bank.scopes() for f in bank.list(scope, superseded=True)):
        readded = [s for e in bank.history(fact.id) if e.event == "readded" for s in sources(e.metadata)]
        if sources(fact.metadata) and _only_from(session, [*sources(fact.metadata), *readded]):
            gone.append(fact.id)
    return gone


def drop_readded_from(bank: MemoryBank, session: str) -> int:
    """Delete the history events of re-adds from ``session`` of facts that stay (they keep its
    wording), checkpointing the WAL when any went; returns how many."""
    dropped = bank.drop_readded(lambda metadata: bool(sources(metadata))
                                and _only_from(session, list(sources(metadata))))
    if dropped:
        bank.scrub()
    return dropped
