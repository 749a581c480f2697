"""Persistence of a :class:`~percache_plugin.rag.index.HybridIndex`: a snapshot of files
switched atomically by ``manifest.json``, verified before anything parses them.

Every file of a save gets a fresh generation name; the manifest, replaced last with
``os.replace``, records each file's size and SHA-256. Loading trusts nothing: file names
must be the generation names this module writes (no ``../``, absolute paths or devices),
sizes and checksums must match, and the HNSW header must agree with the manifest before
hnswlib reads the file (hnswlib trusts its input: a few changed bytes can crash the
process). Any failure raises :class:`CorruptIndexError` naming the file. Files are 0600.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..filemodes import FILE_MODE, private_dir
from .chunking import Chunk

__all__ = ["FORMAT", "VERSION", "CorruptIndexError", "Snapshot", "chunk_record", "parse_snapshot",
           "read_legacy", "read_snapshot", "write_snapshot"]

FORMAT = "percache-hybrid-index"
VERSION = 1
_NAME = re.compile(r"(chunks|embeddings|hnsw)\.[0-9a-f]{12}\.(json|npy|bin)")
_SUFFIX = {"chunks": "json", "embeddings": "npy", "hnsw": "bin"}
_HNSW_HEADER = struct.Struct("<QQQQQQiIQQQdQ")  # hnswlib HierarchicalNSW::saveIndex, in order


class CorruptIndexError(ValueError):
    """A saved index file is missing, altered or not what the manifest says; ``path`` names it."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"index file {str(path)!r}: {reason}")
        self.path = path


@dataclass
class Snapshot:
    """What a verified save holds: the manifest, chunk records, vectors and the HNSW file."""

    manifest: dict[str, Any]
    records: list[dict[str, Any]]
    vectors: np.ndarray
    hnsw_path: Path


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Write through ``write(tmp)`` (a fresh 0600 file in the same directory), fsync, rename."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _fsync_dir(directory: Path) -> None:
    if os.name == "posix":  # directory fsync makes the renames durable; not possible on Windows
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _save_npy(path: Path, array: np.ndarray) -> None:
    with open(path, "wb") as handle:  # a file object: np.save(path) would append ".npy"
        np.save(handle, array, allow_pickle=False)


def write_snapshot(directory: Path, settings: dict[str, Any], records: list[dict[str, Any]],
                   vectors: np.ndarray, save_hnsw: Callable[[Path], None]) -> None:
    """Write a complete save into ``directory`` (created 0700), switch the manifest to it,
    then delete the files of older saves."""
    private_dir(directory)
    generation = uuid.uuid4().hex[:12]
    names = {kind: f"{kind}.{generation}.{suffix}" for kind, suffix in _SUFFIX.items()}
    _atomic_write(directory / names["chunks"], lambda p: p.write_text(json.dumps(records), "utf-8"))
    _atomic_write(directory / names["embeddings"], lambda p: _save_npy(p, vectors))
    _atomic_write(directory / names["hnsw"], save_hnsw)
    files = {kind: {"name": name, "size": (directory / name).stat().st_size,
                    "sha256": _digest(directory / name)} for kind, name in names.items()}
    manifest = {"format": FORMAT, "version": VERSION, **settings, "count": len(records),
                "files": files}
    _atomic_write(directory / "manifest.json",
                  lambda p: p.write_text(json.dumps(manifest, indent=1), "utf-8"))
    _fsync_dir(directory)
    for old in directory.iterdir():
        if _NAME.fullmatch(old.name) and old.name not in names.values():
            old.unlink(missing_ok=True)


def _file(directory: Path, manifest: dict[str, Any], kind: str) -> Path:
    """The verified path of one file of the save (inside ``directory``, size and checksum)."""
    entry = manifest["files"].get(kind) if isinstance(manifest.get("files"), dict) else None
    if isinstance(entry, str):  # saves before checksums were recorded
        raise CorruptIndexError(directory / "manifest.json",
                                "written by an older version without checksums")
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise CorruptIndexError(directory / "manifest.json", f"no valid entry for the {kind} file")
    name = entry["name"]
    if not _NAME.fullmatch(name) or not name.startswith(kind + "."):
        raise CorruptIndexError(directory / "manifest.json",
                                f"names {name!r}, not a file this index writes")
    path = directory / name
    if path.is_symlink() or not path.is_file():
        raise CorruptIndexError(path, "missing or not a regular file")
    if path.stat().st_size != entry.get("size"):
        raise CorruptIndexError(path, f"size {path.stat().st_size}, manifest says {entry.get('size')}")
    if _digest(path) != entry.get("sha256"):
        raise CorruptIndexError(path, "checksum does not match the manifest")
    return path


def _check_hnsw_header(path: Path, dim: int, count: int, labels: int) -> None:
    """The fields hnswlib trusts when it sizes its buffers must agree with the manifest:
    ``count`` live chunks, ``labels`` labels ever given, vectors of ``dim`` floats."""
    with open(path, "rb") as f:
        head = f.read(_HNSW_HEADER.size)
    if len(head) < _HNSW_HEADER.size:
        raise CorruptIndexError(path, "shorter than an HNSW header")
    (offset0, max_elements, cur_count, per_element, label_offset, offset_data, maxlevel,
     enter, max_m, max_m0, m, _mult, _efc) = _HNSW_HEADER.unpack(head)
    data = dim * 4
    size = path.stat().st_size
    ok = (offset0 == 0 and count <= cur_count <= labels
          and cur_count <= max_elements <= 2 * cur_count + 256  # the index grows by doubling
          and 0 < m == max_m <= 1024 and max_m0 == 2 * m and offset_data == max_m0 * 4 + 4
          and label_offset == offset_data + data and per_element == label_offset + 8
          and 0 <= maxlevel < 64 and (cur_count == 0 or enter < cur_count)
          and size >= _HNSW_HEADER.size + cur_count * (per_element + 4))
    if not ok:
        raise CorruptIndexError(path, "HNSW header does not match the manifest (altered file)")


def read_snapshot(directory: Path) -> Snapshot:
    """Read and verify a save; raises FileNotFoundError without a manifest, ValueError for a
    foreign one and :class:`CorruptIndexError` (naming the file) for a damaged one."""
    manifest_path = directory / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"no saved index in {directory} (missing manifest.json)")
    try:
        manifest = json.loads(manifest_path.read_text("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptIndexError(manifest_path, f"not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT \
            or manifest.get("version") != VERSION:
        got = manifest if not isinstance(manifest, dict) else manifest.get("format")
        raise ValueError(f"{manifest_path} is not a {FORMAT} v{VERSION} manifest (format={got!r}, "
                         f"version={manifest.get('version') if isinstance(manifest, dict) else None!r})")
    try:
        dim, count = int(manifest["dim"]), int(manifest["count"])
        chunks_path = _file(directory, manifest, "chunks")
        records = json.loads(chunks_path.read_text("utf-8"))
        vectors_path = _file(directory, manifest, "embeddings")
        vectors = np.load(vectors_path, allow_pickle=False)
        hnsw_path = _file(directory, manifest, "hnsw")
    except (KeyError, TypeError) as exc:
        raise CorruptIndexError(manifest_path, f"incomplete manifest ({exc})") from None
    if not isinstance(records, list) or len(records) != count or vectors.shape != (count, dim):
        raise CorruptIndexError(chunks_path, f"manifest says {count} chunks, found "
                                f"{len(records)} records and embeddings of shape {vectors.shape}")
    _check_hnsw_header(hnsw_path, dim, count, int(manifest.get("next_label", count)))
    return Snapshot(manifest, records, vectors, hnsw_path)


def read_legacy(directory: Path) -> tuple[list[dict[str, Any]], np.ndarray] | None:
    """Chunk records and vectors of a save written before checksums were recorded (to move
    an older store's documents into its database), or None if there is no such save. The
    HNSW file of such a save is never read; names are checked like :func:`read_snapshot`."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text("utf-8"))
        files = manifest["files"]
        names = [files["chunks"], files["embeddings"]]
        if not all(isinstance(n, str) and _NAME.fullmatch(n) for n in names):
            return None
        records = json.loads((directory / names[0]).read_text("utf-8"))
        vectors = np.load(directory / names[1], allow_pickle=False)
    except (OSError, KeyError, TypeError, ValueError):
        return None
    if not isinstance(records, list) or vectors.ndim != 2 or len(records) != len(vectors):
        return None
    return records, vectors


def chunk_record(chunk: Chunk, label: int) -> dict[str, object]:
    """A chunk as saved in ``chunks.*.json``."""
    return {"id": chunk.id, "doc_id": chunk.doc_id, "index": chunk.index, "text": chunk.text,
            "scope": chunk.scope, "metadata": dict(chunk.metadata), "label": label}


def parse_snapshot(snap: Snapshot) -> tuple[dict[str, Any], list[tuple[Chunk, int, np.ndarray]]]:
    """The index settings and (chunk, label, vector) of a verified save; raises
    :class:`CorruptIndexError` when they are unusable."""
    m = snap.manifest
    try:
        weights = [float(w) for w in m["weights"]]
        settings = {"dim": int(m["dim"]), "fusion": m["fusion"], "rrf_k": int(m["rrf_k"]),
                    "weights": (weights[0], weights[1]), "next_label": int(m["next_label"])}
        records = [(Chunk(**{k: v for k, v in r.items() if k != "label"}), int(r["label"]),
                    v.astype(np.float32)) for r, v in zip(snap.records, snap.vectors, strict=True)]
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise CorruptIndexError(snap.hnsw_path.parent / "manifest.json",
                                f"unusable settings or chunk records ({exc})") from None
    return settings, records
