"""Two QA banks on one database file (two processes, or two handles) re-read each other's
changes by the ``generation`` counter. A change the other bank commits while this one re-reads
the rows must be seen by its next look (the generation recorded is the one read before the
rows), and a row the other bank deletes meanwhile is gone, not corrupt. The interleavings are
driven by a wrapper around the bank's row reader, not by timing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from percache_plugin.rag.embeddings import HashEmbedder
from percache_plugin.rag.qa_bank import QABank

Q = "when does the harbor ferry leave?"


class Meanwhile:
    """The bank's row reader, with ``action`` run once at a chosen point of a re-read:
    after the rows were read (``after_rows``) or before the first vector is read (``vector``)."""

    def __init__(self, rows: Any, point: str, action: Callable[[], object]) -> None:
        self._rows, self._point, self._action = rows, point, action
        if point == "vector":  # infos() reads vectors through the reader itself
            inner = rows.vector

            def vector(entry_id: int) -> Any:
                self._once()
                return inner(entry_id)
            rows.vector = vector

    def _once(self) -> None:
        action, self._action = self._action, lambda: None
        action()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rows, name)

    def infos(self, known: Any) -> Iterator[Any]:
        yield from self._rows.infos(known)
        if self._point == "after_rows":
            self._once()


def _banks(tmp_path: Path) -> tuple[QABank, QABank]:
    embedder = HashEmbedder(32)
    return (QABank(tmp_path / "db.sqlite3", embedder, byte_limit=None),
            QABank(tmp_path / "db.sqlite3", embedder, byte_limit=None))


def test_a_change_committed_while_the_rows_are_read_is_seen(tmp_path: Path) -> None:
    a, b = _banks(tmp_path)
    b.add(Q, "at noon", sources=["c1"])
    entry = b.entries()[0]
    a._rows = Meanwhile(a._rows, "after_rows", lambda: b.mark_stale([entry.id]))  # type: ignore[assignment]
    assert len(a) == 1  # A re-reads the rows; B marks the entry stale right after
    assert b.entries()[0].stale
    assert a.lookup(Q, tau=0.5).match is None  # stale in the database: not served
    assert [e.stale for e in a.entries()] == [True]
    a.close()
    b.close()


def test_a_row_deleted_while_the_rows_are_read_is_gone_not_corrupt(tmp_path: Path) -> None:
    a, b = _banks(tmp_path)
    b.add(Q, "at noon", sources=["c1"])
    b.add("where is the choir rehearsal?", "east hall", sources=["c2"])
    first = b.entries()[0]
    a._rows = Meanwhile(a._rows, "vector", lambda: b.delete(first.id))  # type: ignore[assignment]
    assert len(a) == 1
    assert a.stats()["corrupt_rows"] == 0
    assert [e.question for e in a.entries()] == ["where is the choir rehearsal?"]
    a.close()
    b.close()
