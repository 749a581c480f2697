"""kv.node_read: one preadv per node file, checked against the layout; the memory-mapped
reader gives the same tensors, and every malformed file is refused with its reason."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from percache_plugin.kv import integrity
from percache_plugin.kv.integrity import CorruptNodeError, checksum_tensors, read_node_file
from percache_plugin.kv.node_read import direct_read_supported, read_raw, read_tensors, tensors_of

TENSORS = {
    "k.0": torch.randn(2, 5, 4),
    "k.1": torch.randn(2, 5, 4).to(torch.bfloat16),
    "v.0": torch.arange(40, dtype=torch.int64).reshape(2, 5, 4),
    "v.1": torch.randn(2, 5, 4).to(torch.float16),
    "e": torch.empty(0, 3),
}
LAYOUT = [(n, str(t.dtype), tuple(t.shape)) for n, t in TENSORS.items()]
META = {"format": "percache-kv/1", "key": "n"}


def _written(tmp_path: Path, tensors: dict[str, torch.Tensor] = TENSORS) -> Path:
    path = tmp_path / "n.safetensors"
    save_file(tensors, str(path), metadata=META)  # the writer of every store so far
    return path


def _rewrite_header(path: Path, edit) -> None:
    data = path.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    edit(header)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])


def test_reads_what_safetensors_wrote_bit_for_bit(tmp_path: Path) -> None:
    path = _written(tmp_path)
    metadata, tensors = read_tensors(path, LAYOUT)
    assert metadata == META
    with safe_open(str(path), framework="pt") as f:
        for name, t in TENSORS.items():
            assert tensors[name].dtype == t.dtype and torch.equal(tensors[name], f.get_tensor(name))
    # the views share one buffer (no copy per tensor) and checksum like the originals
    assert tensors["k.0"].untyped_storage().data_ptr() == tensors["v.0"].untyped_storage().data_ptr()
    assert checksum_tensors(tensors[n] for n, _, _ in LAYOUT) == checksum_tensors(TENSORS.values())


def test_node_file_reads_the_same_direct_and_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _written(tmp_path)
    crc = checksum_tensors(TENSORS.values())
    direct = read_node_file(path, expected_metadata=META, layout=LAYOUT, checksum=crc)
    monkeypatch.setattr(integrity, "direct_read_supported", lambda dtypes: False)
    mapped = read_node_file(path, expected_metadata=META, layout=LAYOUT, checksum=crc)
    for name in TENSORS:
        assert torch.equal(direct[name], mapped[name])


def test_dtypes_without_a_direct_read_go_through_the_memory_map(tmp_path: Path) -> None:
    t = {"k.0": torch.randn(3, 4).to(torch.float8_e4m3fn)}
    layout = [("k.0", str(t["k.0"].dtype), (3, 4))]
    assert not direct_read_supported([layout[0][1]])
    path = _written(tmp_path, t)
    got = read_node_file(path, expected_metadata=META, layout=layout, checksum=checksum_tensors(t.values()))
    assert torch.equal(got["k.0"].view(torch.uint8), t["k.0"].view(torch.uint8))


def _refused(path: Path, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        read_tensors(path, LAYOUT)
    with pytest.raises(CorruptNodeError):
        read_node_file(path, expected_metadata=META, layout=LAYOUT, checksum=None)


def test_a_flipped_byte_fails_the_checksum(tmp_path: Path) -> None:
    path = _written(tmp_path)
    data = bytearray(path.read_bytes())
    data[-20] ^= 0x10
    path.write_bytes(bytes(data))
    read_tensors(path, LAYOUT)  # the structure is intact ...
    with pytest.raises(CorruptNodeError, match="checksum"):  # ... the bytes are not
        read_node_file(path, expected_metadata=META, layout=LAYOUT, checksum=checksum_tensors(TENSORS.values()))


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    path = _written(tmp_path)
    path.write_bytes(path.read_bytes()[:-7])
    _refused(path, "spans bytes")
    path.write_bytes(path.read_bytes()[:5])
    _refused(path, "truncated")


def test_a_header_longer_than_the_file_is_refused(tmp_path: Path) -> None:
    path = _written(tmp_path)
    data = path.read_bytes()
    path.write_bytes(struct.pack("<Q", 2**62) + data[8:])
    _refused(path, "header length")


def test_offsets_outside_the_data_or_of_the_wrong_size_are_refused(tmp_path: Path) -> None:
    path = _written(tmp_path)
    _rewrite_header(path, lambda h: h["k.0"].update(data_offsets=[0, 10**9]))
    _refused(path, "spans bytes")
    path = _written(tmp_path)
    _rewrite_header(path, lambda h: h["k.0"].update(data_offsets=[-4, 156]))
    _refused(path, "spans bytes")
    path = _written(tmp_path)
    _rewrite_header(path, lambda h: h["k.0"].update(data_offsets="0-160"))
    _refused(path, "malformed data_offsets")


def test_a_misaligned_tensor_is_refused(tmp_path: Path) -> None:
    path = _written(tmp_path)

    def shift(h: dict) -> None:
        b, e = h["k.0"]["data_offsets"]
        h["k.0"]["data_offsets"] = [b + 1, e + 1]

    _rewrite_header(path, shift)
    _refused(path, "misaligned|spans bytes")


def test_dtype_shape_and_names_must_match_the_layout(tmp_path: Path) -> None:
    path = _written(tmp_path)
    raw = read_raw(path)
    with pytest.raises(ValueError, match="expected F32"):
        tensors_of(raw, [(n, "torch.float32", s) for n, _, s in LAYOUT])
    with pytest.raises(ValueError, match="expected"):
        tensors_of(raw, [(n, d, (1, *s)) for n, d, s in LAYOUT])
    with pytest.raises(ValueError, match="names differ"):
        tensors_of(raw, LAYOUT[:-1])
    _rewrite_header(path, lambda h: h.update(__metadata__={"format": 1}))
    _refused(path, "metadata")


def test_garbage_header_is_refused(tmp_path: Path) -> None:
    path = _written(tmp_path)
    data = bytearray(path.read_bytes())
    data[9:20] = b"\xff" * 11
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptNodeError, match="unreadable"):
        read_node_file(path, expected_metadata=META, layout=LAYOUT, checksum=None)


def test_a_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_raw(tmp_path / "gone.safetensors")
