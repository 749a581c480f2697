"""Saved index files are verified before anything parses them (defect 5): checksums, sizes,
the HNSW header, and names that stay inside the index directory."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from percache_plugin.rag.index import CorruptIndexError, HybridIndex
from tests.rag.test_rag_index import EMB, FACTS, _chunks, _index

REPO = Path(__file__).resolve().parents[2]


def _saved(tmp_path: Path) -> tuple[Path, dict]:
    _index(_chunks(FACTS)).save(tmp_path / "idx")
    return tmp_path / "idx", json.loads((tmp_path / "idx" / "manifest.json").read_text())


def _path(directory: Path, manifest: dict, kind: str) -> Path:
    return directory / manifest["files"][kind]["name"]


@pytest.mark.parametrize("kind", ["chunks", "embeddings", "hnsw"])
def test_a_changed_byte_in_any_file_is_detected_naming_it(tmp_path: Path, kind: str) -> None:
    directory, manifest = _saved(tmp_path)
    path = _path(directory, manifest, kind)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptIndexError, match="checksum") as info:
        HybridIndex.load(directory)
    assert info.value.path == path


def test_altered_hnsw_header_never_reaches_hnswlib(tmp_path: Path) -> None:
    """8 changed bytes at the start of the HNSW file (with a manifest rewritten to match, as an
    attacker could) crashed the process inside hnswlib; run in a child to survive a crash."""
    directory, manifest = _saved(tmp_path)
    path = _path(directory, manifest, "hnsw")
    data = bytearray(path.read_bytes())
    data[8:16] = (2**40).to_bytes(8, "little")  # max_elements
    path.write_bytes(bytes(data))
    manifest["files"]["hnsw"].update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    (directory / "manifest.json").write_text(json.dumps(manifest))
    code = ("import sys; from percache_plugin.rag.index import HybridIndex, CorruptIndexError\n"
            "try:\n    HybridIndex.load(sys.argv[1])\nexcept CorruptIndexError as e:\n"
            "    print('detected', e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(directory)], capture_output=True,
                         text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "detected" in out.stdout and path.name in out.stdout and "header" in out.stdout


@pytest.mark.parametrize("name", ["../outside.bin", "/dev/zero", "/etc/passwd",
                                  "hnsw.0123456789ab.bin/../../x", "chunks.0123456789ab.json"])
def test_manifest_names_only_files_of_the_index(tmp_path: Path, name: str) -> None:
    directory, manifest = _saved(tmp_path)
    (tmp_path / "outside.bin").write_bytes(b"x" * 64)
    manifest["files"]["hnsw"]["name"] = name
    (directory / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CorruptIndexError, match="not a file this index writes"):
        HybridIndex.load(directory)


def test_garbage_manifest_and_missing_files(tmp_path: Path) -> None:
    directory, manifest = _saved(tmp_path)
    _path(directory, manifest, "embeddings").unlink()
    with pytest.raises(CorruptIndexError, match="missing"):
        HybridIndex.load(directory)
    (directory / "manifest.json").write_bytes(b"\x00\xff garbage")
    with pytest.raises(CorruptIndexError, match="manifest.json"):
        HybridIndex.load(directory)


def test_saved_files_are_owner_only(tmp_path: Path) -> None:
    directory, _ = _saved(tmp_path)
    assert {p.stat().st_mode & 0o777 for p in directory.iterdir()} == {0o600}
    assert directory.stat().st_mode & 0o777 == 0o700
    assert len(HybridIndex.load(directory)) == len(FACTS)
    assert EMB.dim == HybridIndex.load(directory).dim
