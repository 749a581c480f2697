"""The tables of saved sessions (``root/sessions.sqlite``) and the migration of older stores.

``chat_turns.fact_ids`` / ``bare_ids`` (added after the first stores were written; older rows
read as "nothing recalled"): the memory facts recalled as text into a turn (JSON list) and the
turn's user ids without the memory block (JSON, NULL when nothing was recalled).
"""

from __future__ import annotations

import sqlite3

from ..sqlite_tx import Schema, transaction

__all__ = ["SESSIONS_DIR", "SESSIONS_DB", "SCHEMA", "EXACT_SCHEMA", "VERSION_SCHEMA", "MEMORY_SCHEMA",
           "BLOCKS_SCHEMA", "BUMP", "TURN_COLUMNS", "migrate"]

SESSIONS_DIR = "sessions"
SESSIONS_DB = "sessions.sqlite"

SCHEMA = Schema("sessions", 1, """
CREATE TABLE IF NOT EXISTS chat_sessions (
    fingerprint TEXT NOT NULL, name TEXT NOT NULL, system TEXT, head_ids TEXT NOT NULL,
    first_glue TEXT NOT NULL, next_turn INTEGER NOT NULL, evicted_turns INTEGER NOT NULL,
    PRIMARY KEY (fingerprint, name));
CREATE TABLE IF NOT EXISTS chat_turns (
    fingerprint TEXT NOT NULL, name TEXT NOT NULL, turn_id INTEGER NOT NULL, message TEXT NOT NULL,
    user_ids TEXT NOT NULL, reply_ids TEXT NOT NULL, reply_text TEXT NOT NULL,
    pinned INTEGER NOT NULL, masked INTEGER NOT NULL, fact_ids TEXT NOT NULL DEFAULT '[]', bare_ids TEXT,
    PRIMARY KEY (fingerprint, name, turn_id));
CREATE TABLE IF NOT EXISTS chat_kv (
    fingerprint TEXT NOT NULL, name TEXT NOT NULL, start INTEGER NOT NULL, stop INTEGER NOT NULL,
    file TEXT NOT NULL, checksum TEXT NOT NULL, layout TEXT NOT NULL,
    PRIMARY KEY (fingerprint, name, start));
""")

# The columns of a chat_turns row, in the order :class:`~.persist.SessionStore` writes them.
TURN_COLUMNS = ("fingerprint", "name", "turn_id", "message", "user_ids", "reply_ids", "reply_text",
                "pinned", "masked", "fact_ids", "bare_ids")

# Columns added to tables of older stores: (table, column, declaration).
_ADDED = (("chat_turns", "fact_ids", "TEXT NOT NULL DEFAULT '[]'"), ("chat_turns", "bare_ids", "TEXT"))

# Where a session's stored K/V stops being exact (NULL: all of it is); a session without a row
# (written before this table existed) counts as approximate from position 0.
EXACT_SCHEMA = Schema("sessions_exact", 1, """
CREATE TABLE IF NOT EXISTS chat_exact (
    fingerprint TEXT NOT NULL, name TEXT NOT NULL, approx_from INTEGER,
    PRIMARY KEY (fingerprint, name));
""")

# The latest state of each session name, whatever the weights: bumped by every save, reset and
# delete (under the session's lock, sessions/locks.py), so a handle whose copy is older reads
# the session again before its next turn; ``fingerprint`` says which weights' rows are latest.
VERSION_SCHEMA = Schema("sessions_version", 1, """
CREATE TABLE IF NOT EXISTS chat_version (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, fingerprint TEXT NOT NULL);
""")

BUMP = ("INSERT INTO chat_version VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
        "version = MAX(version, excluded.version - 1) + 1, fingerprint = excluded.fingerprint")

# The memory region of a session (``Config.memory_recall_mode`` 'splice'): its scope (JSON), the
# header's ids and its facts as JSON ``[[fact id, text hash, ids], ...]``.
MEMORY_SCHEMA = Schema("sessions_memory", 1, """
CREATE TABLE IF NOT EXISTS chat_memory (
    fingerprint TEXT NOT NULL, name TEXT NOT NULL, scope TEXT NOT NULL, header TEXT NOT NULL,
    facts TEXT NOT NULL, PRIMARY KEY (fingerprint, name));
""")

# The prefix blocks each session published to the K/V store (session/blocks.py), by key, with the
# memory facts recalled before each block's end (JSON list): deleting the session, or forgetting
# one of those facts, finds the blocks here, without reading the session's turn rows (a corrupt
# row, an evicted turn). Written before the block is stored, so no published block lacks a row.
# The indexes find a session's tags and a block's other publishers without a scan (block_tags.py:
# a session at its budget tags its blocks again after each eviction, so tags grow with its turns).
BLOCKS_SCHEMA = Schema("sessions_blocks", 1, """
CREATE TABLE IF NOT EXISTS chat_blocks (
    fingerprint TEXT NOT NULL, name TEXT NOT NULL, key TEXT NOT NULL, facts TEXT NOT NULL,
    PRIMARY KEY (fingerprint, name, key));
CREATE INDEX IF NOT EXISTS chat_blocks_by_key ON chat_blocks (fingerprint, key, name);
CREATE INDEX IF NOT EXISTS chat_blocks_by_name ON chat_blocks (name);
""")


def migrate(db: sqlite3.Connection) -> int:
    """Add the columns an older store's tables lack (in one write transaction, so two processes
    opening the store at once add each column once); returns how many were added."""
    added = 0
    with transaction(db):
        for table, column, decl in _ADDED:
            columns = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
            if column not in columns:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
                added += 1
    return added
