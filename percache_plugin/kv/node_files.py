"""The file side of the K/V store: one directory per fingerprint, its locks and its sweep.

Several stores (processes or handles) may share a directory: a shared flock on
``kv/.lock``, taken before anything else is opened, tells whether any other is open (only a
lone opener sweeps crash leftovers) and keeps the store admin's changes out while it is held,
and an exclusive flock on ``kv/.write.lock`` (:class:`~percache_plugin.kv.locks.WriteLock`)
is held while a node's file and row change together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

import torch

from .integrity import (
    TensorSpec,
    fsync_dir,
    make_store_dirs,
    node_path,
    prefetch_file,
    publish_node,
    read_node_file,
    sweep_files,
    write_node_temp,
)
from .locks import DirectoryLock, WriteLock

__all__ = ["NodeFiles"]

log = logging.getLogger("percache_plugin.kv.store")


class NodeFiles:
    """Node files of one fingerprint under ``root/kv``."""

    def __init__(self, root: Path, fingerprint: str, *, lock: bool = True) -> None:
        self.root = root
        self.fingerprint = fingerprint
        self.dir = make_store_dirs(root, fingerprint)
        self.write_lock = WriteLock(root / "kv", ".write.lock")
        # Before the store's database is opened: a store admin changing the store holds the
        # lock exclusively, and an opener waits here until the change is complete.
        self._dir_lock = DirectoryLock(root / "kv") if lock else None

    def open_shared(self, all_rows: Callable[[], list[tuple[str, str]]],
                    delete_rows: Callable[[Sequence[tuple[str, str]]], None]) -> None:
        """Join the directory; if no other store has it open, sweep crash leftovers first:
        temp files, files without a row and rows without a file. Without the lock (``lock``
        False: the caller holds it exclusively) nothing is swept."""
        if self._dir_lock is None or not self._dir_lock.exclusive:
            return
        try:
            kv_root = self.root / "kv"
            paths = {(fp, key): node_path(kv_root, fp, key) for fp, key in all_rows()}
            removed = sweep_files(kv_root, keep=set(paths.values()))
            lost = [row for row, path in paths.items() if not path.is_file()]
            if lost:
                delete_rows(lost)
            if removed or lost:
                log.warning("percache store %s: swept %d leftover file(s) and %d row(s) without "
                            "a file", self.root, removed, len(lost))
        finally:
            self._dir_lock.share()

    def file(self, key: str) -> Path:
        return node_path(self.root / "kv", self.fingerprint, key)

    def write_temp(self, key: str, tensors: Mapping[str, torch.Tensor],
                   metadata: Mapping[str, str]) -> tuple[Path, int]:
        """The node's bytes in a fresh temp file (see :func:`publish`)."""
        if not self.dir.is_dir():  # deleted under a live store: recreate it
            make_store_dirs(self.root, self.fingerprint)
        return write_node_temp(self.file(key), tensors, metadata)

    def store(self, key: str, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str], *,
              exists: Callable[[], bool], insert: Callable[[int], bool]) -> bool:
        """Write the node's file, then (under the write lock) publish it and ``insert(size)``
        its row, unless ``exists()`` says another store saved the key meanwhile. The file is
        removed if the row cannot be inserted. Returns what ``insert`` returned."""
        tmp, nbytes = self.write_temp(key, tensors, metadata)
        with self.write_lock:
            if exists():
                tmp.unlink(missing_ok=True)
                return False
            publish_node(tmp, self.file(key))
            try:
                return insert(nbytes)
            except BaseException:
                self.file(key).unlink(missing_ok=True)
                raise

    def read(self, key: str, *, expected_metadata: Mapping[str, str], layout: Sequence[TensorSpec],
             checksum: str | None) -> dict[str, torch.Tensor]:
        return read_node_file(self.file(key), expected_metadata=expected_metadata, layout=layout,
                              checksum=checksum)

    def prefetch(self, keys: Iterable[str]) -> int:
        """Start reading the nodes' files into the OS page cache (:func:`prefetch_file`);
        returns how many were advised."""
        return sum(prefetch_file(self.file(key)) for key in keys)

    def unlink(self, keys: Iterable[str], on_error: Callable[[str, OSError], None]) -> None:
        for key in keys:
            try:
                self.file(key).unlink(missing_ok=True)
            except OSError as exc:  # e.g. a directory at the node's path
                on_error(key, exc)
        fsync_dir(self.dir)

    def close(self) -> None:
        for lock in (self._dir_lock, self.write_lock):
            if lock is not None:
                lock.close()
