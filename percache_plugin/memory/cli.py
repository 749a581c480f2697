"""``percache memory list|search|forget|export STORE``: the facts and turn log of a store,
without a model.

Each action is one entry of :data:`ACTIONS` (``name -> (help, run)``), so another action
joins the group by adding an entry. ``search`` loads the embedder the memory was built with;
``list`` and ``forget`` embed nothing. ``forget`` removes the fact from every model
fingerprint's K/V in the store (nodes that used it as a chunk), every stored answer built on
it, and every saved session's memory region and every chat turn it was recalled into as text
(the turn's memory block goes), with the session's K/V from the first changed position on: its
snapshot slices and the prefix blocks holding those positions (found by their chained
keys, whatever ``prefix_block_tokens`` stored them), then checkpoints the database (see
:mod:`percache_plugin.memory.forget`).
"""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ..admin.store_admin import StoreAdmin, StoreInUseError
from ..cli_errors import UsageError
from ..forget_journal import ForgetJournal
from ..kv.store import DB_NAME
from ..rag.embeddings import Embedder, load_embedder
from ..rag.qa_bank import QABank
from ..session.blocks import drop_blocks
from ..session.persist import SESSIONS_DB, SessionStore
from ..sqlite_tx import BUSY_TIMEOUT_S
from ..turnlog import TurnLog
from ..turnlog.cli import add_export_arguments, export
from .bank import MemoryBank, UnknownFact
from .forget import ForgetReport, forget_everywhere, journal_ids
from .rows import Fact, FactRows

__all__ = ["ACTIONS", "add_arguments", "forget_in_store", "open_memory", "run", "session_fingerprints"]


class _StoredEmbedder:
    """The memory's embedder by name and dimension, for actions that embed nothing."""

    def __init__(self, name: str, dim: int) -> None:
        self.name = name
        self.dim = dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise RuntimeError("this action embeds nothing")


def open_memory(path: Path, *, embed: bool = False) -> MemoryBank:
    """The memory of the store at ``path`` (``embed``: with its real embedder loaded).

    :raises UsageError: ``path`` is not a store, or its memory is empty."""
    db = path / DB_NAME
    if not db.is_file():
        raise UsageError(f"{str(path)!r} is not a percache store (no {DB_NAME} in it)",
                         "pass the directory given to enable(store=...)")
    stored = FactRows.stored_embedder(db)
    if stored is None:
        raise UsageError(f"the store {str(path)!r} holds no memory facts", "add some with pc.memory.add()")
    embedder: Embedder = load_embedder(stored[0]) if embed else _StoredEmbedder(*stored)  # type: ignore[assignment]
    return MemoryBank(db, embedder)


def _line(fact: Fact, extra: str = "") -> str:
    scope = "" if fact.scope is None else f" scope={fact.scope}"
    flag = "" if fact.status == "active" else f" [{fact.status} by {fact.superseded_by}]"
    return f"  {fact.id}{scope}{flag}{extra}: {fact.text}"


def _no_facts(path: Path) -> bool:
    """Whether ``path`` is a store whose memory holds no fact yet (listing or searching it
    finds nothing: not an error, unlike a path that is no store)."""
    db = path / DB_NAME
    return db.is_file() and FactRows.stored_embedder(db) is None


def _list(args: argparse.Namespace) -> int:
    if _no_facts(args.store):
        print("0 facts")
        return 0
    bank = open_memory(args.store)
    try:
        scopes = [args.scope] if args.scope is not None else bank.scopes()
        facts = [f for s in scopes for f in bank.list(s, superseded=args.all)]
        print(f"{len(facts)} facts")
        for fact in facts:
            print(_line(fact))
    finally:
        bank.close()
    return 0


def _search(args: argparse.Namespace) -> int:
    if not args.query:
        raise UsageError("'memory search' needs a QUERY", "e.g. percache memory search STORE 'tea'")
    if _no_facts(args.store):
        print(f"0 facts in scope {args.scope!r}")
        return 0
    bank = open_memory(args.store, embed=True)
    try:
        hits = bank.search(args.query, args.scope, args.k)
        print(f"{len(hits)} facts in scope {args.scope!r}")
        for hit in hits:
            print(_line(hit.fact, f" cos={hit.similarity:.3f}"))
    finally:
        bank.close()
    return 0


def session_fingerprints(root: Path) -> list[str]:
    """The fingerprints of the sessions saved in the store at ``root`` (nothing is created)."""
    db_path = root / SESSIONS_DB
    if not db_path.is_file():
        return []
    db = sqlite3.connect(f"{db_path.as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'chat_sessions'").fetchone() is None:
            return []
        return [str(fp) for (fp,) in db.execute("SELECT DISTINCT fingerprint FROM chat_sessions ORDER BY 1")]
    finally:
        db.close()


def _drop_from_sessions(root: Path, admin: StoreAdmin, fact_id: str) -> tuple[int, int, int]:
    """Take the fact out of every saved session's memory region and of the turns it was
    recalled into as text (their K/V slices from the first changed position on go) and delete
    the stored nodes holding the session's former ids from that position on (prefix blocks of
    any size, found from the store alone); returns the sessions changed, the turns rewritten
    and the nodes deleted."""
    fingerprints = session_fingerprints(root)
    if not fingerprints:
        return 0, 0, 0
    store = SessionStore(root, fingerprints[0])
    try:
        changed = store.drop_fact(fact_id)
        with_kv = set(admin.fingerprints())
        removed = 0
        for cut in changed:
            if cut.fingerprint in with_kv:
                removed += drop_blocks(admin.kv_store(cut.fingerprint), cut.former_ids, cut.start)
        # and those its tags name: an evicted turn's, one whose row is corrupt
        removed += store.tags.drop_fact(fact_id, admin.stored_kv)
    finally:
        store.close()
    return len(changed), sum(cut.turns_rewritten for cut in changed), removed


def forget_in_store(root: Path, admin: StoreAdmin, bank: MemoryBank, qa: QABank,
                    fact_id: str) -> tuple[ForgetReport, int, int, int]:
    """Forget ``fact_id`` in the store at ``root`` with no model (the caller holds
    ``admin.exclusive``): its rows, K/V under every fingerprint, the stored answers built on it,
    saved sessions and the turn log. Returns the report, the sessions changed, the chat turns
    rewritten and the prefix-block nodes deleted.

    :raises UnknownFact: no such fact."""
    stores = [admin.kv_store(fp) for fp in admin.fingerprints()]

    def drop_answers(ids: list[str]) -> int:
        built_on = [e.id for e in qa.entries() if set(ids).intersection(e.sources)]
        return sum(qa.delete(i) for i in built_on)

    journal = ForgetJournal(root / DB_NAME)  # cut short, the next handle on the store completes it
    try:
        with journal.forgetting("fact", journal_ids(bank, fact_id)):
            report = forget_everywhere(bank, fact_id, stores, drop_answers)
            sessions, turns, blocks = _drop_from_sessions(root, admin, report.fact_id)
            if (root / SESSIONS_DB).is_file():
                log = TurnLog(root / SESSIONS_DB)
                try:
                    log.forget_fact(report.fact_id)
                finally:
                    log.close()
    finally:
        journal.close()
    return report, sessions, turns, blocks


def _forget(args: argparse.Namespace) -> int:
    if not args.query:
        raise UsageError("'memory forget' needs a FACT_ID", "see the ids with 'percache memory list STORE'")
    bank = open_memory(args.store)
    try:
        # The QA bank shares the memory's embedder (one handle wrote both).
        qa = QABank(args.store / DB_NAME, bank.embedder, byte_limit=None)
        try:
            # Exclusive: a handle open on the store could save a session region holding the fact again.
            with StoreAdmin(args.store) as admin, admin.exclusive("forget a fact in"):
                try:
                    report, sessions, turns, blocks = forget_in_store(args.store, admin, bank, qa, args.query)
                except UnknownFact as exc:
                    raise UsageError(str(exc), "see the ids with 'percache memory list STORE'") from exc
        except StoreInUseError as exc:
            raise UsageError(str(exc), "close the program using it, or call pc.memory.forget() "
                             "in it") from exc
        finally:
            qa.close()
        scrubbed = bank.scrub()
    finally:
        bank.close()
    print(f"forgot {report.fact_id}: {report.kv_nodes + blocks} K/V nodes, {report.answers} stored answers, "
          f"{sessions} sessions ({turns} chat turns it was recalled into)"
          f"{'' if scrubbed else ' (the database is in use elsewhere: its WAL is emptied later)'}")
    return 0


ACTIONS: dict[str, tuple[str, Callable[[argparse.Namespace], int]]] = {
    "list": ("the facts of every scope (or --scope), --all with superseded ones", _list),
    "search": ("the facts of --scope most similar to QUERY", _search),
    "forget": ("remove fact FACT_ID everywhere (rows, history, K/V, stored answers)", _forget),
    "export": ("the chat turn log as JSONL for fine-tuning (--out FILE, --format sft|preference)", export),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=sorted(ACTIONS),
                   help="; ".join(f"{name}: {text}" for name, (text, _) in ACTIONS.items()))
    p.add_argument("store", type=Path, nargs="?", default=None,
                   help="the store directory (as given to enable(store=...)); or --store DIR")
    p.add_argument("--store", dest="store_option", type=Path, default=None, metavar="DIR",
                   help="the store directory, as an option")
    p.add_argument("query", nargs="?", default=None, help="search: the query; forget: the fact id")
    p.add_argument("--scope", default=None, help="the scope (default: the unscoped memory; list: every scope)")
    p.add_argument("-k", type=int, default=5, help="search: how many facts")
    p.add_argument("--all", action="store_true", help="list: include superseded facts")
    add_export_arguments(p)


def run(args: argparse.Namespace) -> int:
    if args.store is not None and args.store_option is not None and args.store != args.store_option:
        raise UsageError(f"two stores given: {str(args.store)!r} and --store {str(args.store_option)!r}")
    args.store = args.store if args.store is not None else args.store_option
    if args.store is None:
        raise UsageError(f"'memory {args.action}' needs a store directory",
                         f"e.g. percache memory {args.action} --store DIR")
    return ACTIONS[args.action][1](args)
