"""Where a K/V store keeps node tensors: in memory (:class:`MemoryNodes`) or in safetensors
files (:class:`FileNodes`). :class:`~percache_plugin.kv.store.KVStore` keeps the rows, the
limits and the counters, and hands the tensors to one of these.

Both write the tensors and the node's row together (a failed row insert leaves no tensors),
remove rows and tensors together, and read a node back as a fresh :class:`ChunkKV` or raise
:class:`~percache_plugin.kv.integrity.CorruptNodeError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import torch

from .checksums import parse_layer_checksums
from .chunk import ChunkKV
from .integrity import FORMAT, CorruptNodeError, TensorSpec
from .layer_read import LayerReader, open_layered
from .node_files import NodeFiles
from .node_read import direct_read_supported
from .store_index import NodeIndex

__all__ = ["FileNodes", "MemoryNodes", "NodeBackend", "NodeRow"]

# (parent, n_tokens, start, token_hash, checksum, layout_json, extra_json)
NodeRow = tuple[str | None, int, int, str, str, str, str]


class NodeBackend(Protocol):
    """The tensor side of a store. ``owns_copies``: tensors handed to :meth:`store` are kept as
    they are (the store must never alias the caller's), and need no checksum (nothing can rot
    between ``put`` and ``get``)."""

    owns_copies: bool

    def store(self, key: str, chunk: ChunkKV, tensors: dict[str, torch.Tensor], nbytes: int,
              layout: list[TensorSpec], row: NodeRow) -> bool: ...

    def load(self, key: str, layout: list[TensorSpec], row: NodeRow, *, verify: bool,
             layered: bool = False, on_corrupt: Callable[[str], None] | None = None,
             shared: bool = False) -> ChunkKV:
        """The node's K/V. ``layered``: a chunk still being read may be returned
        (``ChunkKV.pending``; ``on_corrupt(reason)`` is called once if a layer fails later).
        ``shared``: tensors held in memory may be returned themselves, not copied (the caller
        never mutates them); others are read afresh anyway."""

    def prefetch(self, keys: Sequence[str]) -> int:
        """Start reading these nodes' tensors ahead of :meth:`load` (asynchronous, best-effort);
        returns how many reads were started."""

    def remove(self, keys: Sequence[str], deltas: dict[str, int],
               on_error: Callable[[str, OSError], None]) -> None:
        """Delete rows (applying the counter ``deltas``) and tensors; a tensor that cannot be
        removed is reported to ``on_error(what, exc)`` and the rest go on."""

    def close(self) -> None: ...


class MemoryNodes:
    """Tensors in a dict (a store with no path)."""

    owns_copies = True

    def __init__(self, index: NodeIndex) -> None:
        self._index = index
        self._tensors: dict[str, ChunkKV] = {}

    def store(self, key: str, chunk: ChunkKV, tensors: dict[str, torch.Tensor], nbytes: int,
              layout: list[TensorSpec], row: NodeRow) -> bool:
        self._tensors[key] = ChunkKV(
            tuple(tensors[f"k.{i}"] for i in range(len(chunk.keys))),
            tuple(tensors[f"v.{i}"] for i in range(len(chunk.values))))
        parent, n_ids, start, token_hash, checksum, layout_json, extra = row
        try:
            return self._index.insert(key, parent, n_ids, start, nbytes, token_hash, checksum,
                                      layout_json, extra)
        except BaseException:
            self._tensors.pop(key, None)
            raise

    def load(self, key: str, layout: list[TensorSpec], row: NodeRow, *, verify: bool,
             layered: bool = False, on_corrupt: Callable[[str], None] | None = None,
             shared: bool = False) -> ChunkKV:
        stored = self._tensors.get(key)
        if stored is None:
            raise CorruptNodeError("tensors missing from memory")
        if shared:
            return stored
        return ChunkKV(tuple(t.clone() for t in stored.keys), tuple(t.clone() for t in stored.values))

    def prefetch(self, keys: Sequence[str]) -> int:
        return 0  # already in memory

    def remove(self, keys: Sequence[str], deltas: dict[str, int],
               on_error: Callable[[str, OSError], None]) -> None:
        self._index.delete(keys, **deltas)
        for k in keys:
            self._tensors.pop(k, None)

    def close(self) -> None:
        self._tensors.clear()


class FileNodes:
    """One safetensors file per node (:class:`~percache_plugin.kv.node_files.NodeFiles`), whose
    header repeats the row's identity (fingerprint, key, token hash, position, checksum) so a
    file that does not belong to the row is caught on read. A node with per-layer checksums
    (``crc32l:``) can be read layer by layer in the background (:mod:`.layer_read`)."""

    owns_copies = False

    def __init__(self, index: NodeIndex, files: NodeFiles) -> None:
        self._index = index
        self.files = files
        self.reader = LayerReader()

    def metadata(self, key: str, row: NodeRow) -> dict[str, str]:
        _, n_tokens, start, token_hash, checksum, _, _ = row
        return {"format": FORMAT, "fingerprint": self.files.fingerprint, "key": key,
                "token_hash": token_hash, "start": str(start), "n_tokens": str(n_tokens),
                "checksum": checksum}

    def store(self, key: str, chunk: ChunkKV, tensors: dict[str, torch.Tensor], nbytes: int,
              layout: list[TensorSpec], row: NodeRow) -> bool:
        parent, n_ids, start, token_hash, checksum, layout_json, extra = row
        meta = {**self.metadata(key, row), "dtype": layout[0][1]}
        return self.files.store(
            key, tensors, meta, exists=lambda: self._index.row(key, "1") is not None,
            insert=lambda size: self._index.insert(key, parent, n_ids, start, size, token_hash,
                                                   checksum, layout_json, extra))

    def load(self, key: str, layout: list[TensorSpec], row: NodeRow, *, verify: bool,
             layered: bool = False, on_corrupt: Callable[[str], None] | None = None,
             shared: bool = False) -> ChunkKV:
        checksum = row[4]
        n_layers = sum(1 for n, _, _ in layout if n.startswith("k."))
        try:
            crcs = parse_layer_checksums(checksum, n_layers) if verify else None
        except ValueError as exc:
            raise CorruptNodeError(f"its database row holds a corrupt checksum ({exc})") from None
        if layered and (crcs is not None or not verify) and direct_read_supported([d for _, d, _ in layout]):
            try:
                node = open_layered(self.files.file(key), layout, key, self.metadata(key, row), crcs,
                                    on_corrupt)
            except FileNotFoundError:
                raise CorruptNodeError("file is missing") from None
            except Exception as exc:  # the file is untrusted input: any parse failure is corruption
                raise CorruptNodeError(f"unreadable ({type(exc).__name__}: {exc})") from None
            self.reader.submit(node)
            tensors, pending = node.tensors, node.gate
        else:  # the whole file, checked before it is used (old files: one CRC over every tensor)
            tensors = self.files.read(key, expected_metadata=self.metadata(key, row), layout=layout,
                                      checksum=checksum if verify else None)
            pending = None
        return ChunkKV(tuple(tensors[f"k.{i}"] for i in range(n_layers)),
                       tuple(tensors[f"v.{i}"] for i in range(n_layers)), pending=pending)

    def prefetch(self, keys: Sequence[str]) -> int:
        return self.files.prefetch(keys)

    def remove(self, keys: Sequence[str], deltas: dict[str, int],
               on_error: Callable[[str, OSError], None]) -> None:
        with self.files.write_lock:
            self._index.delete(keys, **deltas)
            self.files.unlink(keys, lambda k, exc: on_error(str(self.files.file(k)), exc))

    def close(self) -> None:
        self.reader.close()
        self.files.close()
