"""Opening the store's database: several processes creating it at once."""

from __future__ import annotations

import multiprocessing as mp
import sys
from pathlib import Path

import pytest

from percache_plugin.sqlite_tx import Schema, connect

_T = Schema("t", 1, "CREATE TABLE IF NOT EXISTS t (x INTEGER PRIMARY KEY);")


def _open_and_write(path: str, start: object) -> None:
    start.wait()  # type: ignore[attr-defined]
    try:
        db = connect(Path(path), _T)
        db.execute("INSERT INTO t VALUES (NULL)")
        db.close()
    except Exception as exc:  # the exit code carries it to the test
        print(exc, file=sys.stderr)
        sys.exit(1)


@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="needs fork to start openers together")
def test_processes_creating_one_database_at_once_all_open_it(tmp_path: Path) -> None:
    # The losers of the race to switch a new database to WAL got "database is locked" at
    # once (about 1 opener in 40), without SQLite's busy handler.
    ctx = mp.get_context("fork")
    failed = 0
    for i in range(60):
        path = str(tmp_path / f"s{i}.sqlite3")
        start = ctx.Barrier(4)
        procs = [ctx.Process(target=_open_and_write, args=(path, start)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        failed += sum(p.exitcode != 0 for p in procs)
        db = connect(Path(path), _T)
        assert db.execute("SELECT COUNT(*) FROM t").fetchone()[0] == sum(p.exitcode == 0 for p in procs)
        db.close()
    assert failed == 0
