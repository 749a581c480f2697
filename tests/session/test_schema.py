"""A store written before chat turns recorded their recalled facts opens, and its turns read
as "nothing recalled"."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import percache_plugin as percache
from percache_plugin.session.schema import SESSIONS_DB, migrate
from tests.helpers import tiny_pair

# chat_turns as the first stores wrote it
OLD_TURNS = """
CREATE TABLE chat_turns (
    fingerprint TEXT NOT NULL, name TEXT NOT NULL, turn_id INTEGER NOT NULL, message TEXT NOT NULL,
    user_ids TEXT NOT NULL, reply_ids TEXT NOT NULL, reply_text TEXT NOT NULL,
    pinned INTEGER NOT NULL, masked INTEGER NOT NULL, PRIMARY KEY (fingerprint, name, turn_id));
"""


def _columns(db: sqlite3.Connection) -> list[str]:
    return [r[1] for r in db.execute("PRAGMA table_info(chat_turns)")]


def _make_old(path: Path) -> None:
    db = sqlite3.connect(path)
    rows = db.execute("SELECT fingerprint, name, turn_id, message, user_ids, reply_ids, reply_text, pinned, "
                      "masked FROM chat_turns").fetchall()
    db.executescript("DROP TABLE chat_turns;" + OLD_TURNS)
    db.executemany("INSERT INTO chat_turns VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    assert "fact_ids" not in _columns(db) and rows
    db.close()


def test_an_old_store_opens_and_its_turns_recalled_nothing(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    config = dict(store=tmp_path, embedder="hash", predict="off")
    pc = percache.enable(model, tok, **config)
    first = pc.chat("Hello there.", max_new_tokens=3)
    pc.close()
    _make_old(tmp_path / SESSIONS_DB)

    pc = percache.enable(model, tok, **config)
    session = pc.sessions.get("default")
    assert [t.user_ids for t in session.turns] == [first.prompt_ids[len(session.head_ids):]]
    assert session.turns[0].fact_ids == [] and session.turns[0].bare_ids is None
    pc.chat("And now?", max_new_tokens=3)  # saved with the new columns
    pc.close()
    db = sqlite3.connect(tmp_path / SESSIONS_DB)
    assert _columns(db)[-2:] == ["fact_ids", "bare_ids"]
    assert db.execute("SELECT fact_ids, bare_ids FROM chat_turns").fetchall() == [("[]", None)] * 2
    db.close()


def test_migrate_adds_each_column_once(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "s.sqlite", isolation_level=None)
    db.executescript(OLD_TURNS)
    assert migrate(db) == 2 and migrate(db) == 0
    db.close()
