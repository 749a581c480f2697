"""Snapshots of persona heads: the K/V of a session's persistent head (template opening and
the persona's system prompt), keyed by the model fingerprint and the head's token ids.

The key is what the K/V is a function of: the same ids under the same weights (adapter
included) give the same K/V, so a snapshot is served only to that pair, never under another
adapter or prompt. Each snapshot is one safetensors file (written to a temp file, fsynced,
renamed; its fingerprint in the metadata, a checksum in SQLite); a missing or corrupt file (or row) is
a miss (the head is prefilled and written again), never a wrong cache. Without a store
directory the snapshots are kept in memory. Read from files, they go through the RAM tier
(``percache_load_head``): a persona's head is read at every switch to it.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Collection
from pathlib import Path

import torch

from ..filemodes import private_dir
from ..kv.chunk import ChunkKV
from ..kv.integrity import (
    CorruptNodeError,
    checksum_tensors,
    read_node_file,
    write_node_file,
)
from ..kv.store_index import layout_of
from ..sqlite_tx import Schema, checkpoint, connect, transaction

__all__ = ["HEADS_DIR", "HeadKV", "HeadLoader", "HeadSnapshots", "SCHEMA", "head_key"]

HEADS_DIR = "personas"

SCHEMA = Schema("persona_heads", 1, """
CREATE TABLE IF NOT EXISTS persona_heads (
    fingerprint TEXT NOT NULL, head TEXT NOT NULL, tokens INTEGER NOT NULL, file TEXT NOT NULL,
    checksum TEXT NOT NULL, layout TEXT NOT NULL, PRIMARY KEY (fingerprint, head));
""")

HeadKV = list[tuple[torch.Tensor, torch.Tensor]]
"""Per layer, keys and values shaped ``(heads, tokens, head_dim)``."""

HeadLoader = Callable[[str, tuple[object, ...], Callable[[], "ChunkKV | None"]], "ChunkKV | None"]
"""``via(name, version, read)`` of :meth:`HeadSnapshots.load`."""


def head_key(head_ids: list[int]) -> str:
    """blake2b of the head's ids (hex)."""
    return hashlib.blake2b(json.dumps(head_ids).encode(), digest_size=16).hexdigest()


class HeadSnapshots:
    """Persona head K/V under ``root/personas`` (``root`` None: in memory)."""

    def __init__(self, root: Path | None, db_path: Path | None) -> None:
        self.root = root
        self.db = connect(db_path, SCHEMA) if root is not None else None
        self._memory: dict[tuple[str, str], HeadKV] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        if self.db is not None:
            self.db.close()

    def _dir(self, fingerprint: str) -> Path:
        assert self.root is not None
        return private_dir(self.root / HEADS_DIR / fingerprint[:32])

    def get(self, fingerprint: str, head_ids: list[int]) -> HeadKV | None:
        """The head's K/V under ``fingerprint``; None when there is no valid snapshot."""
        kv = self.load(fingerprint, head_ids)
        return None if kv is None else list(zip(kv.keys, kv.values, strict=True))

    def load(self, fingerprint: str, head_ids: list[int], via: HeadLoader | None = None) -> ChunkKV | None:
        """The head's K/V under ``fingerprint`` (None: no valid snapshot). ``via(name, version,
        read)``: what reads a snapshot file (the ``percache_load_head`` hook: the RAM tier),
        given its row (``version``) and the read checked against that row."""
        key = head_key(head_ids)
        if self.db is None:  # held in memory already: no tier in front
            with self._lock:
                held = self._memory.get((fingerprint, key))
            return None if held is None else ChunkKV(tuple(k for k, _ in held), tuple(v for _, v in held))
        with self._lock:
            row = self.db.execute("SELECT tokens, file, checksum, layout FROM persona_heads "
                                  "WHERE fingerprint = ? AND head = ?", (fingerprint, key)).fetchone()
        specs = None if row is None or row[0] != len(head_ids) else layout_of(row[3])
        if specs is None:  # no snapshot, another head, or a layout not the JSON written
            return None

        def read() -> ChunkKV | None:
            try:  # the checksum is the row's: a file replaced since is a miss
                tensors = read_node_file(self._dir(fingerprint) / row[1], layout=specs, checksum=row[2],
                                         expected_metadata={"fingerprint": fingerprint, "head": key})
            except (CorruptNodeError, OSError, ValueError):
                return None
            n = len(tensors) // 2
            return ChunkKV(tuple(tensors[f"k.{i}"] for i in range(n)), tuple(tensors[f"v.{i}"] for i in range(n)))

        return read() if via is None else via(f"{fingerprint}/{key}", tuple(row[:3]), read)

    def put(self, fingerprint: str, head_ids: list[int], kv: HeadKV) -> None:
        """Store the head's K/V under ``fingerprint`` (replacing an earlier snapshot)."""
        key = head_key(head_ids)
        if self.db is None:
            with self._lock:
                self._memory[(fingerprint, key)] = [(k.clone(), v.clone()) for k, v in kv]
            return
        tensors: dict[str, torch.Tensor] = {}
        for i, (k, v) in enumerate(kv):
            tensors[f"k.{i}"] = k.detach().to("cpu").contiguous()
            tensors[f"v.{i}"] = v.detach().to("cpu").contiguous()
        name = f"{key}.safetensors"
        write_node_file(self._dir(fingerprint) / name, tensors, {"fingerprint": fingerprint, "head": key})
        layout = json.dumps([(n, str(t.dtype), list(t.shape)) for n, t in tensors.items()])
        with self._lock, transaction(self.db):
            self.db.execute("INSERT OR REPLACE INTO persona_heads VALUES (?, ?, ?, ?, ?, ?)",
                            (fingerprint, key, len(head_ids), name, checksum_tensors(tensors.values()), layout))

    def drop(self, keys: Collection[str]) -> int:
        """Delete the snapshots of the heads ``keys`` (:func:`head_key`) under every fingerprint,
        files and rows, then checkpoint the database (the store's session database: a removed
        persona's row goes from its file too); returns how many."""
        if self.db is None:
            with self._lock:
                gone = [k for k in self._memory if k[1] in keys]
                for k in gone:
                    del self._memory[k]
            return len(gone)
        with self._lock, transaction(self.db):
            rows = [r for r in self.db.execute("SELECT fingerprint, head, file FROM persona_heads") if r[1] in keys]
            self.db.executemany("DELETE FROM persona_heads WHERE fingerprint = ? AND head = ?",
                                [(fp, head) for fp, head, _ in rows])
        with self._lock:
            checkpoint(self.db)
        for fp, _, file in rows:
            (self._dir(fp) / file).unlink(missing_ok=True)
        return len(rows)
