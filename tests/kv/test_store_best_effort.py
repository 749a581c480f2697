"""KVStore writes are best-effort: a failed write is counted, never raised; reads need no write.
Also: corrupt database rows are misses, and every file the store creates is owner-only."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest

from percache_plugin.kv import node_files
from percache_plugin.kv.store import KVStore
from tests.kv.test_store import FP, assert_same, ids, make_kv, node_file


def _store(tmp_path: Path) -> KVStore:
    return KVStore(tmp_path / "store", fingerprint=FP)


def test_full_disk_on_write_is_counted_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _store(tmp_path) as store:
        def full(*args: object, **kwargs: object) -> object:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(node_files, "write_node_temp", full)
        assert store.put("a", make_kv(), parent=None, start=0, token_ids=ids()) is False
        assert store.write_errors == 1 and store.stats().write_errors == 1
        assert not store.contains("a")


def test_full_database_on_write_is_counted_and_reads_still_work(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        kv = make_kv()
        assert store.put("a", kv, parent=None, start=0, token_ids=ids())
        db = store._index.db
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.execute(f"PRAGMA max_page_count = {pages}")  # the database cannot grow: SQLITE_FULL
        big = make_kv(1, n=400, k_dim=64)
        for i in range(3):  # rows that need new pages
            store.put(f"b{i}", big, parent=None, start=0, token_ids=ids(400, i),
                      extra={"pad": "x" * 3000})
        assert store.write_errors >= 1
        assert_same(store.get("a", token_ids=ids()), kv)
        db.execute("PRAGMA query_only = ON")  # now a read-only database
        before = store.write_errors
        assert_same(store.get("a", token_ids=ids()), kv)  # the hit counter cannot be written
        assert store.get("missing") is None
        assert store.write_errors == before + 2
        assert store.put("c", make_kv(2), parent=None, start=0, token_ids=ids(5, 9)) is False
        assert not any(p.name.startswith(".tmp") for p in (store.path / "kv").rglob("*"))


def test_directory_at_a_node_path(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        assert store.put("a", make_kv(), parent=None, start=0, token_ids=ids())
        path = node_file(store, "a")
        path.unlink()
        path.mkdir()
        assert store.get("a", token_ids=ids()) is None  # corrupt: a miss, not an exception
        assert store.stats().corrupt == 1 and store.write_errors == 1  # the directory stays
        assert store.put("a", make_kv(), parent=None, start=0, token_ids=ids()) is False
        assert store.write_errors == 2 and not store.contains("a")


def test_kv_folder_deleted_under_a_live_store(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        assert store.put("a", make_kv(), parent=None, start=0, token_ids=ids())
        shutil.rmtree(tmp_path / "store" / "kv")
        assert store.get("a", token_ids=ids()) is None
        kv = make_kv(3)
        assert store.put("b", kv, parent=None, start=0, token_ids=ids(5, 3))
        assert_same(store.get("b", token_ids=ids(5, 3)), kv)
        assert store.write_errors == 0


def test_corrupt_json_in_a_row_is_a_miss_and_removed(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        assert store.put("a", make_kv(), parent=None, start=0, token_ids=ids())
        store._index.db.execute("UPDATE kv_nodes SET layout = '{not json', extra = '[1' WHERE key = 'a'")
        assert store.info("a") is not None  # corrupt extra reads as empty
        assert store.get("a", token_ids=ids()) is None
        assert not store.contains("a") and store.stats().corrupt == 1


def _modes(root: Path) -> dict[str, int]:
    out = {str(root): stat.S_IMODE(root.stat().st_mode)}
    for p in root.rglob("*"):
        out[str(p.relative_to(root))] = stat.S_IMODE(p.stat().st_mode)
    return out


def test_every_file_and_directory_is_owner_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "store"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)  # an existing directory readable by others
    old = os.umask(0o022)
    try:
        with caplog.at_level(logging.WARNING, logger="percache"), KVStore(root, fingerprint=FP) as store:
            assert store.put("a", make_kv(), parent=None, start=0, token_ids=ids())
            modes = _modes(root)
            assert "percache.sqlite3-wal" in modes and "percache.sqlite3-shm" in modes
            loose = {p: oct(m) for p, m in modes.items()
                     if m & 0o077 or m not in (0o600, 0o700)}
            assert not loose, loose
    finally:
        os.umask(old)
    assert any("accessible by other users" in r.message and str(root) in r.message
               for r in caplog.records)


def test_two_stores_in_one_process_write_concurrently(tmp_path: Path) -> None:
    stores = [_store(tmp_path) for _ in range(2)]
    errors: list[BaseException] = []

    def work(s: KVStore, off: int) -> None:
        try:
            for i in range(20):
                key = f"n{i % 7}"  # both write the same keys: the first row stands
                s.put(key, make_kv(i % 7), parent=None, start=0, token_ids=ids(5, i % 7))
                got = s.get(key, token_ids=ids(5, i % 7))
                if got is not None:
                    assert_same(got, make_kv(i % 7))
                if i % 5 == off:
                    s.delete(key)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s, i)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        assert all(s.write_errors == 0 for s in stores)
        files = {p.name for p in (tmp_path / "store" / "kv").rglob("*.safetensors")}
        assert files == {f"{n.key}.safetensors" for n in stores[0].nodes()}
    finally:
        for s in stores:
            s.close()
