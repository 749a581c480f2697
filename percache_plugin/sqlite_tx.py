"""The one way this package opens SQLite: a connection factory, a schema registry and a
transaction helper shared by every component of the store's database.

:func:`connect` creates the database file owner-only (0600) before SQLite opens it, so
SQLite gives its ``-wal`` and ``-shm`` files the same mode; it sets WAL (readers never block
the writer), ``synchronous=NORMAL`` (a process crash loses nothing committed) and a busy
timeout (concurrent writers from other processes or handles wait instead of failing) and
``secure_delete`` (deleted content is zeroed in the file, not left in free pages).
Each component declares its tables as a :class:`Schema`; :func:`connect` creates them and
records their version in ``percache_schemas``, refusing a database written by another
version of that component.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from .filemodes import FILE_MODE, private_file, tighten

__all__ = ["BUSY_TIMEOUT_S", "Database", "Schema", "apply_schema", "checkpoint", "connect", "transaction"]

BUSY_TIMEOUT_S = 30.0
_REGISTRY = """
CREATE TABLE IF NOT EXISTS percache_schemas (name TEXT PRIMARY KEY, version INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class Schema:
    """The tables of one component: idempotent DDL (``CREATE ... IF NOT EXISTS``) and a
    version, bumped when the layout changes incompatibly."""

    name: str
    version: int
    sql: str


def connect(path: Path | None, *schemas: Schema) -> sqlite3.Connection:
    """An autocommit connection to ``path`` (``None``: a private in-memory database) with
    ``schemas`` applied; usable from any thread (callers serialize with their own lock).

    Raises PermissionError naming the file when it cannot be opened, ValueError when a
    schema's recorded version differs."""
    if path is None:
        db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    else:
        try:
            private_file(path)
            db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False,
                                 isolation_level=None)
            db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            _set_wal(db)
            db.execute("PRAGMA synchronous = NORMAL")
            # Deleted rows are overwritten with zeros, so a forgotten memory or a removed answer
            # leaves no text in the database's free pages.
            db.execute("PRAGMA secure_delete = ON")
        except (OSError, sqlite3.Error) as exc:
            raise PermissionError(f"cannot open store database {str(path)!r}: {exc}") from None
    try:
        db.executescript(_REGISTRY)
        for schema in schemas:
            apply_schema(db, schema)
    except BaseException:
        db.close()
        raise
    if path is not None:  # SQLite copies the database's mode; older stores may predate that
        for suffix in ("-wal", "-shm"):
            tighten(path.with_name(path.name + suffix), FILE_MODE, warn=False)
    return db


def _set_wal(db: sqlite3.Connection) -> None:
    """Switch to WAL, waiting up to the busy timeout. Several processes opening a new store
    at once race for the switch, and SQLite answers the losers "database is locked" at once,
    without its busy handler (about 1 opener in 40 when 4 start together)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.001
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def apply_schema(db: sqlite3.Connection, schema: Schema) -> None:
    """Create ``schema``'s tables and check (or record) its version."""
    db.executescript(schema.sql)
    with transaction(db):
        row = db.execute("SELECT version FROM percache_schemas WHERE name = ?",
                         (schema.name,)).fetchone()
        if row is None:
            db.execute("INSERT INTO percache_schemas VALUES (?, ?)", (schema.name, schema.version))
        elif int(row[0]) != schema.version:
            raise ValueError(f"the store's {schema.name} tables have version {row[0]}, this "
                             f"percache reads version {schema.version}; use a new store")


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` on an autocommit connection; rolls back on any error
    (the write lock is taken up front, so concurrent writers wait instead of deadlocking)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def checkpoint(db: sqlite3.Connection) -> bool:
    """Move every WAL frame into the database file and truncate the WAL: until then the file
    keeps the pages as they were before a delete (``secure_delete`` zeroes the new pages, in the
    WAL). False when a reader elsewhere kept frames (the next checkpoint moves them)."""
    busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    return not busy


class Database:
    """Base of the classes that own one connection: ``tx()`` is a write transaction."""

    db: sqlite3.Connection

    def tx(self) -> AbstractContextManager[None]:
        return transaction(self.db)

    def scrub(self) -> bool:
        """:func:`checkpoint` this database (after deleting what must leave no trace)."""
        return checkpoint(self.db)

    def close(self) -> None:
        self.db.close()
