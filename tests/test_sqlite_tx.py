"""Opening the store's database: several processes creating it at once."""

from __future__ import annotations

import multiprocessing as mp
import subprocess
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


def test_another_process_closing_leaves_an_open_database_working(tmp_path: Path) -> None:
    # Opening a second component on the database used to open and close a descriptor of its
    # file, dropping the process's POSIX locks: another process closing its connection then
    # took the database as unused and deleted the WAL, and every later write was lost.
    path = tmp_path / "db.sqlite3"
    first = connect(path, _T)
    first.execute("INSERT INTO t VALUES (1)")
    second = connect(path, _T)  # another component of the same handle
    try:
        peek = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT COUNT(*) FROM t').fetchone(); c.close()"
        subprocess.run([sys.executable, "-c", peek, str(path)], check=True)
        assert path.with_name(path.name + "-wal").exists(), "the WAL was deleted under open connections"
        second.execute("INSERT INTO t VALUES (2)")
        read = "import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT x FROM t').fetchall())"
        seen = subprocess.run([sys.executable, "-c", read, str(path)], check=True, capture_output=True,
                              text=True).stdout.strip()
        assert seen == "[(1,), (2,)]", seen
    finally:
        first.close()
        second.close()
