"""Layer-by-layer reads of node files: per-layer checksums, waits, corruption, old files, threads."""

from __future__ import annotations

import json
import struct
import threading
import time
from pathlib import Path
from unittest import mock

import pytest

from percache_plugin.kv import store as store_module
from percache_plugin.kv.checksums import checksum_tensors, layer_checksums, parse_layer_checksums
from percache_plugin.kv.layer_read import CorruptLayerError, LayerGate
from percache_plugin.kv.store import KVStore
from tests.kv.test_store import FP, assert_same, ids, make_kv, node_file

READER = "percache-layer-reader"


def reader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == READER]


def no_reader_left(timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while reader_threads() and time.monotonic() < end:
        time.sleep(0.01)
    return not reader_threads()


def flip_byte(path: Path, tensor: str) -> None:
    """Flip one byte in the middle of ``tensor``'s bytes in a safetensors file."""
    data = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    begin, end = json.loads(data[8:8 + n])[tensor]["data_offsets"]
    data[8 + n + (begin + end) // 2] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.fixture
def disk(tmp_path: Path):
    s = KVStore(tmp_path / "store", fingerprint=FP)
    yield s
    s.close()


def test_layer_checksums_round_trip() -> None:
    kv = make_kv(layers=3)
    text = layer_checksums(kv.keys, kv.values)
    crcs = parse_layer_checksums(text, 3)
    assert crcs is not None and len(crcs) == 3
    assert parse_layer_checksums(checksum_tensors(kv.keys), 3) is None  # the whole-file scheme
    with pytest.raises(ValueError, match="3 values for 4 layers"):
        parse_layer_checksums(text, 4)


def test_layered_get_is_bit_identical_to_the_whole_file_read(disk: KVStore) -> None:
    kv = make_kv(layers=4, n=7)
    assert disk.put("a", kv, parent=None, start=0, token_ids=ids(7))
    whole = disk.get("a", token_ids=ids(7))
    layered = disk.get("a", token_ids=ids(7), layered=True)
    assert whole is not None and whole.pending is None
    assert layered is not None and layered.pending is not None
    for layer in range(4):
        layered.pending.wait(layer)
    assert layered.pending.ok
    assert_same(layered, whole)
    assert_same(layered, kv)
    assert no_reader_left()


def test_a_corrupt_last_layer_raises_at_its_wait_and_drops_the_node(disk: KVStore) -> None:
    assert disk.put("a", make_kv(layers=3), parent=None, start=0, token_ids=ids())
    flip_byte(node_file(disk, "a"), "v.2")
    kv = disk.get("a", token_ids=ids(), layered=True)
    assert kv is not None and kv.pending is not None  # the header is fine: nothing read yet
    kv.pending.wait(0)
    kv.pending.wait(1)  # the layers before the bad one are served
    with pytest.raises(CorruptLayerError, match="layer 2") as err:
        kv.pending.wait(2)
    assert err.value.key == "a" and err.value.layer == 2
    with pytest.raises(CorruptLayerError):  # again, without counting it twice
        kv.ready()
    assert disk.stats().corrupt == 1
    assert not disk.contains("a")
    assert no_reader_left()


def test_a_whole_file_read_checks_per_layer_checksums_too(disk: KVStore) -> None:
    assert disk.put("a", make_kv(layers=3), parent=None, start=0, token_ids=ids())
    flip_byte(node_file(disk, "a"), "k.1")
    assert disk.get("a", token_ids=ids()) is None
    assert disk.stats().corrupt == 1


def old_format_put(store: KVStore, key: str, kv: object) -> None:
    """Store a node the way the first format did: one CRC over every tensor."""
    whole = lambda tensors, names, like: checksum_tensors(tensors[n] for n in names)  # noqa: E731
    with mock.patch.object(store_module, "node_checksum", whole):
        assert store.put(key, kv, parent=None, start=0, token_ids=ids())  # type: ignore[arg-type]


def test_old_files_are_read_whole_and_still_checked(disk: KVStore) -> None:
    kv = make_kv(layers=3)
    old_format_put(disk, "old", kv)
    row = disk._index.row("old", "checksum")
    assert row is not None and row[0].startswith("crc32:")
    got = disk.get("old", token_ids=ids(), layered=True)
    assert got is not None and got.pending is None  # read and checked before it is returned
    assert_same(got, kv)
    flip_byte(node_file(disk, "old"), "v.2")
    assert disk.get("old", token_ids=ids(), layered=True) is None
    assert disk.stats().corrupt == 1
    assert not reader_threads()


def test_memory_stores_ignore_layered() -> None:
    with KVStore(None, fingerprint=FP) as s:
        kv = make_kv()
        assert s.put("a", kv, parent=None, start=0, token_ids=ids())
        got = s.get("a", token_ids=ids(), layered=True)
        assert got is not None and got.pending is None
        assert_same(got, kv)


def test_closing_the_store_ends_the_reader_and_fails_unread_layers(tmp_path: Path) -> None:
    s = KVStore(tmp_path / "store", fingerprint=FP)
    for i in range(6):
        assert s.put(f"n{i}", make_kv(i, layers=8, n=64, k_dim=64), parent=None, start=0, token_ids=ids(64))
    got = [s.get(f"n{i}", token_ids=ids(64), layered=True) for i in range(6)]
    s.close()
    assert no_reader_left()
    for kv in got:
        assert kv is not None and kv.pending is not None
        assert kv.pending.finished  # read, or failed by the close: nobody waits forever
        if not kv.pending.ok:
            with pytest.raises(CorruptLayerError, match="closed"):
                kv.ready()


def test_a_gate_wakes_waiters_in_other_threads() -> None:
    gate = LayerGate("k", 2)
    seen: list[int] = []
    t = threading.Thread(target=lambda: (gate.wait(1), seen.append(1)))
    t.start()
    gate._advance()
    time.sleep(0.05)
    assert not seen
    gate._advance()
    t.join(5)
    assert seen == [1] and gate.ok


def test_a_reader_that_stops_unexpectedly_fails_its_waiters(disk: KVStore) -> None:
    assert disk.put("a", make_kv(layers=3), parent=None, start=0, token_ids=ids())
    with mock.patch("percache_plugin.kv.layer_read.os.preadv", side_effect=SystemExit("boom")):
        kv = disk.get("a", token_ids=ids(), layered=True)
        assert kv is not None and kv.pending is not None
        raised: list[BaseException] = []

        def wait() -> None:
            try:
                kv.ready()
            except CorruptLayerError as exc:
                raised.append(exc)

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        waiter.join(10)
    assert not waiter.is_alive(), "the wait never returned"
    assert len(raised) == 1 and "boom" in str(raised[0])
    assert no_reader_left()
