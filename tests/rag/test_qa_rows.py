"""The QA bank's rows shared by several banks and processes; corrupt rows; scopes; models."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from pathlib import Path

import pytest

from percache_plugin.rag.embeddings import HashEmbedder
from percache_plugin.rag.qa_bank import QABank

Q = "When is the choir rehearsal this week?"


def _bank(db: Path, **kw: object) -> QABank:
    return QABank(db, HashEmbedder(256), **kw)  # type: ignore[arg-type]


def test_two_banks_on_one_file_see_each_others_writes(tmp_path: Path) -> None:
    db = tmp_path / "percache.sqlite3"
    a, b = _bank(db), _bank(db)
    a.add(Q, "Thursday.")
    hit = b.lookup(Q, tau=0.9)
    assert hit.match is not None and hit.match.entry.answer == "Thursday."
    b.add(Q, "Friday.")  # the same question: an upsert onto a's row, not a UNIQUE error
    assert len(a) == len(b) == 1
    served = a.lookup(Q, tau=0.9).match
    assert served is not None and served.entry.answer == "Friday."
    assert b.delete(served.entry.id)
    assert a.lookup(Q, tau=0.9).match is None and len(a) == 0
    a.close()
    b.close()


def _writer(db: str, n: int, tag: str) -> None:
    bank = QABank(db, HashEmbedder(256))
    for i in range(n):
        bank.add(f"Question {i} about the rehearsal?", f"{tag} {i}")
        bank.lookup(f"Question {(i * 7) % n} about the rehearsal?", tau=0.9)
    bank.close()


def test_two_processes_store_the_same_questions_without_errors(tmp_path: Path) -> None:
    db = str(tmp_path / "percache.sqlite3")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(db, 30, t)) for t in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    with _bank(Path(db)) as bank:
        assert len(bank) == 30


def test_corrupt_json_in_a_row_is_a_miss_and_removed(tmp_path: Path) -> None:
    db = tmp_path / "percache.sqlite3"
    bank = _bank(db)
    entry = bank.add(Q, "Thursday.", sources=["c1"])
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE qa_entries SET sources = '{not json' WHERE id = ?", (entry.id,))
    result = bank.lookup(Q, tau=0.9)
    assert result.match is None
    assert bank.stats()["corrupt_rows"] == 1 and len(bank.entries()) == 0
    bank.close()
    with sqlite3.connect(db) as raw:  # a reopening bank skips and removes it too
        raw.execute(
            "INSERT INTO qa_entries (question, qkey, answer, scope, scope_key, sources, created, "
            "last_access, origin, nbytes, vector) VALUES ('q', 'q', 'a', NULL, 'null', 'x', 0, "
            "0, 'user', 1, zeroblob(8))"
        )
    with _bank(db) as again:
        assert len(again) == 0 and again.stats()["corrupt_rows"] == 1


def test_unscoped_lookup_sees_nothing_of_scoped_entries() -> None:
    bank = QABank(None, HashEmbedder(256))
    bank.add(Q, "Thursday.", scope="alice")
    empty = QABank(None, HashEmbedder(256))
    for scope in (None, "bob"):
        result = bank.lookup(Q, tau=0.5, scope=scope)
        assert result == empty.lookup(Q, tau=0.5, scope=scope)
        assert result.best is None and result.rejected_by is None
        assert bank.similar(Q, tau=0.0, scope=scope) == []


def test_answers_are_bound_to_the_model_unless_shared(tmp_path: Path) -> None:
    db = tmp_path / "percache.sqlite3"
    first = _bank(db, model="fingerprint-A")
    first.add(Q, "Thursday.")
    other = _bank(db, model="fingerprint-B")
    result = other.lookup(Q, tau=0.5)
    assert result.match is None and result.best is None and result.rejected_by is None
    other.add(Q, "Friday.")  # its own entry, beside the first model's
    assert first.lookup(Q, tau=0.9).match.entry.answer == "Thursday."  # type: ignore[union-attr]
    assert other.lookup(Q, tau=0.9).match.entry.answer == "Friday."  # type: ignore[union-attr]
    current = ["fingerprint-C"]  # e.g. an adapter switched on: the next call sees it
    switching = _bank(db, model=lambda: current[0])
    assert switching.lookup(Q, tau=0.9).match is None
    current[0] = "fingerprint-A"
    assert switching.lookup(Q, tau=0.9).match.entry.answer == "Thursday."  # type: ignore[union-attr]
    shared = _bank(db, model="fingerprint-C", share_across_models=True)
    assert shared.lookup(Q, tau=0.9).match is not None
    assert {e.model for e in shared.entries()} == {"fingerprint-A", "fingerprint-B"}


def test_a_version_1_table_is_migrated(tmp_path: Path) -> None:
    db = tmp_path / "percache.sqlite3"
    with sqlite3.connect(db) as raw:
        raw.executescript(
            "CREATE TABLE qa_entries (id INTEGER PRIMARY KEY AUTOINCREMENT, question TEXT NOT "
            "NULL, qkey TEXT NOT NULL, answer TEXT, scope TEXT, scope_key TEXT NOT NULL, sources "
            "TEXT NOT NULL, stale INTEGER NOT NULL DEFAULT 0, hits INTEGER NOT NULL DEFAULT 0, "
            "created REAL NOT NULL, last_access REAL NOT NULL, origin TEXT NOT NULL, nbytes "
            "INTEGER NOT NULL, vector BLOB NOT NULL);"
            "CREATE UNIQUE INDEX qa_entries_key ON qa_entries (scope_key, qkey);"
        )
    with _bank(db, model="m") as bank:
        bank.add(Q, "Thursday.")
        assert bank.lookup(Q, tau=0.9).match is not None
    with pytest.raises(ValueError, match="embedder"):
        QABank(db, HashEmbedder(128))
