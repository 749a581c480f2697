"""Node backends: tensors and rows are written, read and removed together, in memory and in files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from percache_plugin.kv.chunk import plain
from percache_plugin.kv.integrity import CorruptNodeError, TensorSpec, checksum_tensors
from percache_plugin.kv.node_backends import FileNodes, MemoryNodes, NodeBackend, NodeRow
from percache_plugin.kv.node_files import NodeFiles
from percache_plugin.kv.store_index import DB_NAME, NodeIndex
from tests.kv.test_store import make_kv

FP = "fp-backend"


def _backend(kind: str, tmp_path: Path) -> tuple[NodeBackend, NodeIndex]:
    if kind == "memory":
        index = NodeIndex(None, FP)
        return MemoryNodes(index), index
    index = NodeIndex(tmp_path / DB_NAME, FP)
    return FileNodes(index, NodeFiles(tmp_path, FP)), index


@pytest.mark.parametrize("kind", ["memory", "files"])
def test_store_load_remove(kind: str, tmp_path: Path) -> None:
    nodes, index = _backend(kind, tmp_path)
    kv = make_kv(1)
    tensors = {f"k.{i}": plain(t, nodes.owns_copies) for i, t in enumerate(kv.keys)}
    tensors.update({f"v.{i}": plain(t, nodes.owns_copies) for i, t in enumerate(kv.values)})
    layout: list[TensorSpec] = [(n, str(t.dtype), tuple(t.shape)) for n, t in tensors.items()]
    checksum = "none" if nodes.owns_copies else checksum_tensors(tensors.values())
    row: NodeRow = (None, 5, 0, "hash", checksum, json.dumps(layout), "{}")
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    assert nodes.store("a", kv, tensors, nbytes, layout, row)
    assert index.row("a", "1") is not None
    back = nodes.load("a", layout, row, verify=True)
    assert all(torch.equal(x, y) for x, y in zip(back.keys + back.values, kv.keys + kv.values, strict=True))
    if nodes.owns_copies:  # a copy: the caller's edits do not reach the stored tensors
        back.keys[0].add_(1)
        assert torch.equal(nodes.load("a", layout, row, verify=True).keys[0], kv.keys[0])
    nodes.remove(["a"], {}, lambda what, exc: pytest.fail(f"{what}: {exc}"))
    assert index.row("a", "1") is None
    with pytest.raises(CorruptNodeError):
        nodes.load("a", layout, row, verify=True)
    nodes.close()
    index.close()
