"""``percache store remove DIR --session NAME``: delete a conversation from a store with no
model, as ``pc.sessions.delete`` does in a handle, with the same functions: the session's rows
and K/V slices under every fingerprint (a persona's too) and the slice files no row names, the
prefix blocks it published (:mod:`..session.block_tags`), its
turn log rows (each database checkpointed so no old WAL frame keeps the text), its turns queued
for extraction, and the memory facts drawn from it alone, forgotten as ``percache memory
forget`` does; the re-adds from it of facts stated elsewhere lose their history events."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..idle import IdleQueue
from ..kv.store import DB_NAME
from ..memory.cli import forget_in_store, open_memory, session_fingerprints
from ..memory.rows import FactRows
from ..memory.session_facts import drawn_only_from, drop_queued_turns, drop_readded_from
from ..rag.qa_bank import QABank
from ..session.persist import SESSIONS_DB, SessionStore
from ..session.sessions import UnknownSession
from ..turnlog import TurnLog
from .store_admin import StoreAdmin

__all__ = ["SessionRemoval", "remove_session"]


@dataclass(frozen=True)
class SessionRemoval:
    """What ``remove_session`` deleted."""

    name: str
    logged_turns: int  # turn log rows
    queued_turns: int  # extraction tasks dropped from the idle queue
    facts: list[str]  # ids of the memory facts drawn from the session alone, forgotten


def remove_session(root: Path, name: str) -> SessionRemoval:
    """Delete session ``name`` from the store at ``root`` (see the module docstring).

    :raises StoreInUseError: a handle or another process has the store open.
    :raises UnknownSession: no session of that name is saved there."""
    with StoreAdmin(root) as admin, admin.exclusive("remove a session from"):
        fingerprints = session_fingerprints(root)
        store = SessionStore(root, fingerprints[0]) if fingerprints else None
        try:
            if store is None or not store.saved(name):
                known = ", ".join(_names(store)) or "none"
                raise UnknownSession(f"no session {name!r} in store {str(root)!r} (known: {known})")
            store.tags.drop_session(name, admin.stored_kv)
            store.delete(name)
        finally:
            if store is not None:
                store.close()
        log = TurnLog(root / SESSIONS_DB)
        try:
            logged = log.delete_session(name)
        finally:
            log.close()
        queue = IdleQueue(root / DB_NAME)
        try:
            queued = drop_queued_turns(queue, name)
        finally:
            queue.close()
        return SessionRemoval(name, logged, queued, _forget_drawn(root, admin, name))


def _names(store: SessionStore | None) -> list[str]:
    if store is None:
        return []
    return sorted({str(n) for (n,) in store.db.execute("SELECT DISTINCT name FROM chat_sessions")})


def _forget_drawn(root: Path, admin: StoreAdmin, name: str) -> list[str]:
    """Forget the facts drawn from session ``name`` alone, as ``percache memory forget`` does."""
    if FactRows.stored_embedder(root / DB_NAME) is None:
        return []
    bank = open_memory(root)
    try:
        # the QA bank shares the memory's embedder (one handle wrote both)
        qa = QABank(root / DB_NAME, bank.embedder, byte_limit=None)
        try:
            gone = drawn_only_from(bank, name)
            for fact_id in gone:
                forget_in_store(root, admin, bank, qa, fact_id)
        finally:
            qa.close()
        drop_readded_from(bank, name)
        bank.scrub()
    finally:
        bank.close()
    return gone
