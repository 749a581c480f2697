"""``percache store info|list|remove|purge|clear PATH``: look into a store and manage it
(``remove --session``: :mod:`.session_delete`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cli_errors import UsageError
from ..session.sessions import UnknownSession
from .session_delete import remove_session
from .store_admin import StoreAdmin, StoreInUseError

__all__ = ["add_arguments", "run"]

_ACTIONS = ("info", "list", "remove", "purge", "clear")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=_ACTIONS,
                   help="info: sizes, entries, hit counts, fingerprints; list: documents and QA "
                        "entries; remove: a document with its chunks, K/V and QA entries, or a "
                        "conversation (--session) as pc.sessions.delete does; purge: "
                        "K/V of other model fingerprints; clear: everything")
    p.add_argument("path", type=Path, help="the store directory (as given to enable(store=...))")
    p.add_argument("--doc", default=None, help="remove: the document id (see 'list')")
    p.add_argument("--scope", default=None, help="remove: the document's scope")
    p.add_argument("--session", default=None,
                   help="remove: the session (conversation) name, instead of --doc")
    p.add_argument("--keep", default=None,
                   help="purge: the fingerprint (or a prefix) to keep; default the newest")
    p.add_argument("--yes", action="store_true", help="clear: do not ask for confirmation")


def _open(path: Path) -> StoreAdmin:
    try:
        return StoreAdmin(path)
    except FileNotFoundError as exc:
        raise UsageError(str(exc), "pass the directory given to enable(store=...)") from exc


def _list(admin: StoreAdmin) -> None:
    docs = admin.documents()
    print(f"{len(docs)} documents")
    for d in docs:
        scope = "" if d.scope is None else f" scope={d.scope}"
        print(f"  {d.doc_id}{scope}: {d.chunks} chunks, {d.words} words, {d.qa_entries} QA entries")
    entries = admin.qa_entries()
    print(f"{len(entries)} QA entries")
    for e in entries:
        flags = "".join((" stale" if e.stale else "", "" if e.answer is not None else " prefill-only"))
        print(f"  #{e.id} [{e.origin}{flags}] hits {e.hits}: {e.question}")


def _remove_session(path: Path, name: str) -> int:
    _open(path).close()  # not a store: the same error as the other actions
    try:
        r = remove_session(path, name)
    except UnknownSession as exc:
        raise UsageError(str(exc), "see the sessions with pc.sessions.names()") from exc
    print(f"removed session {r.name!r}: {r.logged_turns} logged turns, {r.queued_turns} queued "
          f"extractions, {len(r.facts)} memory facts drawn from it alone")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except StoreInUseError as exc:
        raise UsageError(str(exc), "stop the program using it, then run the command again") from exc


def _run(args: argparse.Namespace) -> int:
    if args.action == "remove" and bool(args.doc) == bool(args.session):
        raise UsageError("'store remove' needs --doc DOC_ID or --session NAME (one of them)",
                         "see the document ids with 'percache store list PATH'")
    if args.action == "remove" and args.session:
        return _remove_session(args.path, args.session)
    with _open(args.path) as admin:
        if args.action == "info":
            print(admin.info().summary())
        elif args.action == "list":
            _list(admin)
        elif args.action == "remove":
            try:
                r = admin.remove_document(args.doc, scope=args.scope)
            except KeyError as exc:
                raise UsageError(str(exc.args[0]), "see the ids with 'percache store list PATH'") from exc
            print(f"removed {r.documents} document(s): {r.chunks} chunks, {r.kv_nodes} K/V nodes, "
                  f"{r.qa_entries} QA entries; {r.stale_answers} other answers of its scope marked stale")
        elif args.action == "purge":
            try:
                removed = admin.purge(args.keep)
            except ValueError as exc:
                raise UsageError(str(exc), "see the fingerprints with 'percache store info PATH'") from exc
            print(f"removed {removed} K/V nodes of other model fingerprints")
        else:
            if not args.yes:
                reply = input(f"delete everything in {args.path}? [y/N] ")
                if reply.strip().lower() not in ("y", "yes"):
                    print("nothing deleted")
                    return 1
            admin.clear()
            print(f"cleared {args.path}")
    return 0
