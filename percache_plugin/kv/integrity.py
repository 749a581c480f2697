"""The K/V store on disk: directory layout, atomic node files, verified reads, crash sweep.

Layout: ``<root>/kv/<fp-tag>/<key>.safetensors`` (``fp-tag`` = hash of the model
fingerprint, so two models sharing a root never overwrite each other's file), all
directories mode 0700. A node file is a plain safetensors file (tensors ``k.{layer}`` / ``v.{layer}``) whose
metadata binds it to a model fingerprint, a token-id hash and a checksum of the tensor
bytes. Reads never trust the file: everything is checked against what the caller
expects (the store's SQLite row) and any mismatch raises :class:`CorruptNodeError`.

Checksum: CRC-32 (the zlib polynomial) over the raw tensor bytes, one per layer in files
written since the layer-by-layer reader (``crc32l:``), one over every tensor in older ones
(``crc32:``); :mod:`.checksums` says which, and both are read. Measured on 90 MiB of fp32
(2-core x86, Python 3.11, zlib 1.2.13): crc32 31 ms (2.8 GB/s), sha1 57 ms, sha256 60 ms,
blake2b-64 127 ms, md5 141 ms. CRC32 detects every single-bit flip and all burst errors
up to 32 bits, which is the failure model here (torn or bit-rotted files), not tampering.
With the optional ``isal`` package (``pip install 'percache-plugin[fast]'``) the same CRC-32 is
computed by ISA-L, about 5x faster (88 MiB: 12.5 vs 62 ms on the same machine); the values are
identical, so stores written with either read with either.
"""

from __future__ import annotations

import array
import hashlib
import os
import re
import secrets
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save

from ..filemodes import private_dir
from .checksums import checksum_tensors, node_checksum
from .node_read import direct_read_supported, read_tensors

__all__ = [
    "FORMAT",
    "NODE_SUFFIX",
    "TEMP_PREFIX",
    "CorruptNodeError",
    "TensorSpec",
    "checksum_tensors",
    "fsync_dir",
    "hash_token_ids",
    "make_store_dirs",
    "node_path",
    "prefetch_file",
    "read_node_file",
    "sweep_files",
    "publish_node",
    "validate_key",
    "write_node_file",
    "write_node_temp",
]

FORMAT = "percache-kv/1"
NODE_SUFFIX = ".safetensors"
TEMP_PREFIX = ".tmp-"
_ANY_TEMP = ".tmp"  # ours, and the ".tmpXXXXXX" of older writers of this directory

# Keys become file names: keep them portable and free of path separators.
_KEY_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")

# (name, dtype as str(torch.dtype), shape), in the canonical order used for the checksum.
TensorSpec = tuple[str, str, tuple[int, ...]]


class CorruptNodeError(Exception):
    """A node file is missing, unreadable or does not match what the store recorded."""


def validate_key(key: object, what: str = "key") -> str:
    """Return ``key`` if it is usable as a node key (and file name), else raise ValueError."""
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise ValueError(
            f"invalid node {what} {key!r}: expected 1-200 characters from [A-Za-z0-9._-], "
            "not starting with '.'"
        )
    return key


def hash_token_ids(token_ids: Sequence[int]) -> str:
    """Stable hex digest of a token-id sequence (int64 little-endian, blake2b-128)."""
    ids = token_ids.tolist() if hasattr(token_ids, "tolist") else list(token_ids)
    try:
        buf = array.array("q", ids)
    except (TypeError, OverflowError) as exc:
        raise ValueError(f"token_ids must be a flat sequence of ints: {exc}") from None
    if sys.byteorder == "big":
        buf.byteswap()
    return hashlib.blake2b(buf.tobytes(), digest_size=16).hexdigest()


def node_path(kv_root: Path, fingerprint: str, key: str) -> Path:
    tag = hashlib.blake2b(fingerprint.encode(), digest_size=8).hexdigest()
    return kv_root / tag / (key + NODE_SUFFIX)


def make_store_dirs(root: Path, fingerprint: str) -> Path:
    """Create ``root``, ``root/kv`` and the fingerprint's directory (0700; an existing one
    readable by others is tightened with a warning); return the last.

    Raises ValueError when a path component is not a directory and PermissionError when
    the directory cannot be created or written, naming the path.
    """
    if root.exists() and not root.is_dir():
        raise ValueError(f"store path {str(root)!r} exists and is not a directory")
    fp_dir = node_path(root / "kv", fingerprint, "x").parent
    for d in (root, root / "kv", fp_dir):
        private_dir(d)
    return fp_dir


def sweep_files(kv_root: Path, keep: set[Path]) -> int:
    """Delete temp files and node files not in ``keep`` under ``kv_root/*/``; return the count."""
    removed = 0
    for sub in kv_root.iterdir():
        if not sub.is_dir():
            continue
        stale = [f for f in sub.iterdir() if f.is_file() and (
            f.name.startswith(_ANY_TEMP) or (f.name.endswith(NODE_SUFFIX) and f not in keep))]
        for f in stale:
            f.unlink(missing_ok=True)
        if stale:
            fsync_dir(sub)
            removed += len(stale)
    return removed


def fsync_dir(path: Path) -> None:
    """Make a rename or unlink inside ``path`` durable (no-op where unsupported)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_node_temp(
    final: Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]
) -> tuple[Path, int]:
    """Write ``tensors`` to a fresh temp file beside ``final`` (fsynced); return it and its size.

    Publish it with :func:`publish_node`; on any error the temp file is removed."""
    tmp = final.with_name(f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}{NODE_SUFFIX}")
    # Serialize in memory and write our own temp file: safetensors' save_file() writes through
    # a temp file of its own (".tmpXXXXXX"), which a kill would leave under a name we don't own.
    payload = save(dict(tensors), metadata=dict(metadata))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp, len(payload)


def publish_node(tmp: Path, final: Path) -> None:
    """``os.replace`` the temp file onto ``final`` and fsync the directory: after a crash the
    final name holds either nothing, the old file or the complete new one."""
    try:
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(final.parent)


def write_node_file(
    final: Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]
) -> int:
    """Write ``tensors`` to ``final`` atomically and durably; return the file size."""
    tmp, size = write_node_temp(final, tensors, metadata)
    publish_node(tmp, final)
    return size


def prefetch_file(path: Path) -> bool:
    """Ask the OS to start reading ``path`` into its page cache now (``posix_fadvise(WILLNEED)``,
    asynchronous: the call returns at once). Several files advised back to back are read with
    the disk's full queue depth while the caller works through the first ones. False, and
    nothing done, where the file cannot be opened or the platform has no ``posix_fadvise``."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:  # pragma: no cover - macOS, Windows
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # missing or unreadable: the read reports it
        return False
    try:
        advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        return True
    except OSError:  # pragma: no cover - a filesystem without readahead
        return False
    finally:
        os.close(fd)


def _read_mapped(path: Path, layout: Sequence[TensorSpec]) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """The file's metadata and tensors through safetensors' memory map (the dtypes
    :func:`~.node_read.read_tensors` does not read, or a big-endian host)."""
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
        names = set(f.keys())
        if names != {name for name, _, _ in layout}:
            raise CorruptNodeError(f"tensor names differ from the recorded layout: {sorted(names)}")
        return metadata, {name: f.get_tensor(name) for name, _, _ in layout}


def read_node_file(
    path: Path,
    *,
    expected_metadata: Mapping[str, str],
    layout: Sequence[TensorSpec],
    checksum: str | None,
) -> dict[str, torch.Tensor]:
    """Load a node file and check it against what the store recorded.

    ``checksum`` None skips the CRC (header, metadata, names, dtypes and shapes are
    always checked: they cost microseconds). Raises CorruptNodeError with the reason. The
    tensors are read with one ``preadv`` into one buffer (:func:`~.node_read.read_tensors`;
    they are views into it) where the dtypes allow, else through safetensors' memory map.
    """
    try:
        if direct_read_supported([dtype for _, dtype, _ in layout]):
            metadata, tensors = read_tensors(path, layout)
        else:
            metadata, tensors = _read_mapped(path, layout)
        for name, want in expected_metadata.items():
            if metadata.get(name) != want:
                raise CorruptNodeError(f"metadata {name!r} is {metadata.get(name)!r}, expected {want!r}")
    except CorruptNodeError:
        raise
    except FileNotFoundError:
        raise CorruptNodeError("file is missing") from None
    except Exception as exc:  # the file is untrusted input: any parse failure is corruption
        raise CorruptNodeError(f"unreadable ({type(exc).__name__}: {exc})") from None
    for name, dtype, shape in layout:
        t = tensors[name]
        if str(t.dtype) != dtype or tuple(t.shape) != tuple(shape):
            raise CorruptNodeError(
                f"tensor {name} is {t.dtype} {tuple(t.shape)}, expected {dtype} {tuple(shape)}"
            )
    if checksum is not None:
        actual = node_checksum(tensors, (name for name, _, _ in layout), checksum)
        if actual != checksum:
            raise CorruptNodeError(f"checksum {actual} does not match recorded {checksum}")
    return tensors
