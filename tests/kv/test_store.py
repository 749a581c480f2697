"""KVStore: round trips, persistence, fingerprint isolation, LFU eviction, integrity."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from percache_plugin.kv.store import ChunkKV, KVStore

FP = "fp-model-a"


def make_kv(seed: int = 0, *, layers: int = 2, heads: int = 2, n: int = 5, k_dim: int = 4,
            v_dim: int | None = None, dtype: torch.dtype = torch.float32) -> ChunkKV:
    g = torch.Generator().manual_seed(seed)
    keys = tuple(torch.randn(heads, n, k_dim, generator=g).to(dtype) for _ in range(layers))
    values = tuple(torch.randn(heads, n, v_dim or k_dim, generator=g).to(dtype) for _ in range(layers))
    return ChunkKV(keys, values)


def ids(n: int = 5, offset: int = 0) -> list[int]:
    return list(range(offset, offset + n))


def node_file(store: KVStore, key: str) -> Path:
    assert store.path is not None
    (found,) = (store.path / "kv").rglob(f"{key}.safetensors")
    return found


def node_file_of(store: KVStore, key: str) -> Path:
    """The file of ``key`` for ``store``'s fingerprint when several share the directory."""
    (found,) = [p for p in (store.path / "kv").rglob(f"{key}.safetensors")
                if p.read_bytes().find(store.fingerprint.encode()) >= 0]
    return found


def assert_same(a: ChunkKV, b: ChunkKV) -> None:
    assert len(a.keys) == len(b.keys)
    for x, y in zip(a.keys + a.values, b.keys + b.values, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert torch.equal(x, y)


@pytest.fixture(params=["memory", "disk"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    s = KVStore(None if request.param == "memory" else tmp_path / "store", fingerprint=FP)
    yield s
    s.close()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_round_trip_keeps_values_and_dtype(store: KVStore, dtype: torch.dtype) -> None:
    kv = make_kv(dtype=dtype, v_dim=6)  # V head_dim differs from K's (MLA-style)
    assert store.put("a", kv, parent=None, start=0, token_ids=ids()) is True
    got = store.get("a", token_ids=ids())
    assert got is not None
    assert_same(got, kv)
    assert got.n_tokens == 5 and got.nbytes == kv.nbytes


def test_put_twice_does_not_rewrite(store: KVStore) -> None:
    store.put("a", make_kv(1), parent=None, start=0, token_ids=ids())
    assert store.put("a", make_kv(2), parent=None, start=0, token_ids=ids()) is False
    assert_same(store.get("a"), make_kv(1))


def test_get_returns_a_copy(store: KVStore) -> None:
    kv = make_kv()
    store.put("a", kv, parent=None, start=0, token_ids=ids())
    kv.keys[0].zero_()  # the caller reusing its buffers must not change the store
    got = store.get("a")
    got.values[0].zero_()  # nor may a consumer mutating what it got (generate does)
    assert_same(store.get("a"), make_kv())


def test_storage_dtype_bf16_halves_bytes(tmp_path: Path) -> None:
    kv = make_kv(layers=4, heads=4, n=64, k_dim=32)
    with KVStore(tmp_path / "f32", fingerprint=FP) as full, \
            KVStore(tmp_path / "bf16", fingerprint=FP, storage_dtype=torch.bfloat16) as half:
        full.put("a", kv, parent=None, start=0, token_ids=ids(64))
        half.put("a", kv, parent=None, start=0, token_ids=ids(64))
        ratio = half.total_bytes() / full.total_bytes()
        assert 0.49 < ratio < 0.52, ratio
        got = half.get("a")
        assert got.keys[0].dtype == torch.bfloat16
        assert_same(got, kv.to(torch.bfloat16))
        assert torch.allclose(got.to(torch.float32).keys[0], kv.keys[0], rtol=1e-2, atol=1e-2)


def test_persists_across_reopen(tmp_path: Path) -> None:
    with KVStore(tmp_path, fingerprint=FP) as s:
        s.put("root", make_kv(1), parent=None, start=0, token_ids=ids())
        s.put("child", make_kv(2), parent="root", start=5, token_ids=ids(5, 5),
              extra={"doc": "mail-7"})
        s.get("child")
    with KVStore(tmp_path, fingerprint=FP) as s:
        assert_same(s.get("root"), make_kv(1))
        info = s.info("child")
        assert (info.parent, info.start, info.n_tokens, info.hits, info.extra) == (
            "root", 5, 5, 1, {"doc": "mail-7"})
        assert s.stats().hits == 2  # counters persist too


def test_fingerprint_isolation(tmp_path: Path) -> None:
    with KVStore(tmp_path, fingerprint="model-a") as a, KVStore(tmp_path, fingerprint="model-b") as b:
        a.put("same", make_kv(1), parent=None, start=0, token_ids=ids())
        assert not b.contains("same")
        assert b.info("same") is None and b.nodes() == []
        assert b.get("same") is None
        assert b.put("same", make_kv(2), parent=None, start=0, token_ids=ids()) is True
        assert_same(a.get("same"), make_kv(1))
        assert_same(b.get("same"), make_kv(2))
        assert a.stats().corrupt == 0 and b.stats().entries == 1


def test_contains_info_children_delete(store: KVStore) -> None:
    store.put("root", make_kv(), parent=None, start=0, token_ids=ids())
    store.put("a", make_kv(), parent="root", start=5, token_ids=ids(5, 5))
    store.put("b", make_kv(), parent="a", start=10, token_ids=ids(5, 10))
    store.put("c", make_kv(), parent="root", start=5, token_ids=ids(5, 20))
    assert store.contains("b") and not store.contains("zzz")
    assert [n.key for n in store.children(None)] == ["root"]
    assert [n.key for n in store.children("root")] == ["a", "c"]
    info = store.info("b")
    assert (info.parent, info.start, info.n_tokens, info.hits) == ("a", 10, 5, 0)
    assert info.nbytes > 0 and len(info.token_hash) == 32
    assert store.delete("a") == 2  # a and its child b
    assert {n.key for n in store.nodes()} == {"root", "c"}
    assert store.delete("root", with_descendants=False) == 1
    assert store.contains("c") and store.delete("missing") == 0
    if store.path is not None:
        assert [p.name for p in (store.path / "kv").rglob("*.safetensors")] == ["c.safetensors"]


def test_lfu_evicts_least_used_leaves_first(store: KVStore) -> None:
    size = make_kv().nbytes

    def put(key: str, parent: str | None, hits: int) -> None:
        store.put(key, make_kv(), parent=parent, start=0, token_ids=ids())
        for _ in range(hits):
            store.get(key)

    put("r", None, 0)
    put("x", "r", 5)
    put("y", None, 1)
    put("z", None, 3)
    node = store.info("x").nbytes  # file size on disk, tensor bytes in memory
    assert node >= size
    store.set_byte_limit(4 * node + node // 2)
    put("w", None, 0)  # 5 nodes > limit: y (1 hit) goes; r has 0 hits but x depends on it
    assert {n.key for n in store.nodes()} == {"r", "x", "z", "w"}
    assert store.set_byte_limit(2 * node + node // 2) == 2  # w (0 hits), then z (3)
    assert {n.key for n in store.nodes()} == {"r", "x"}
    assert store.set_byte_limit(node + node // 2) == 1  # x must go before its parent
    assert [n.key for n in store.nodes()] == ["r"]
    assert store.set_byte_limit(None) == 0 and store.stats().evictions == 4
    if store.path is not None:
        assert [p.name for p in (store.path / "kv").rglob("*.safetensors")] == ["r.safetensors"]


def test_lfu_ties_go_to_oldest_access(store: KVStore) -> None:
    for key in ("p", "q", "r"):
        store.put(key, make_kv(), parent=None, start=0, token_ids=ids())
    store.get("q")
    store.get("p")
    store.get("r")  # all one hit; q was accessed longest ago
    store.set_byte_limit(store.total_bytes() - 1)
    assert {n.key for n in store.nodes()} == {"p", "r"}


def test_node_bigger_than_limit_is_refused(store: KVStore) -> None:
    store.set_byte_limit(make_kv().nbytes - 1)
    assert store.put("big", make_kv(), parent=None, start=0, token_ids=ids()) is False
    assert not store.contains("big") and store.total_bytes() == 0
    assert store.stats().bytes_written == 0  # refused up front, not written then evicted
    if store.path is not None:
        assert list((store.path / "kv").rglob("*.safetensors")) == []


def _corrupt_and_check(tmp_path: Path, damage) -> None:
    with KVStore(tmp_path, fingerprint=FP) as s:
        s.put("parent", make_kv(1), parent=None, start=0, token_ids=ids())
        s.put("node", make_kv(2), parent="parent", start=5, token_ids=ids(5, 5))
        s.put("kid", make_kv(3), parent="node", start=10, token_ids=ids(5, 10))
        path = node_file(s, "node")
        damage(path)
        assert s.get("node") is None
        st = s.stats()
        assert (st.corrupt, st.misses, st.hits) == (1, 1, 0)
        assert not path.exists() and not s.contains("node")
        assert s.get("node") is None and s.stats().corrupt == 1  # now a plain miss
        assert_same(s.get("kid"), make_kv(3))  # descendants stay valid


def _flip_tensor_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    header = int.from_bytes(data[:8], "little")
    data[8 + header + (len(data) - 8 - header) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def test_bit_flip_in_tensor_is_detected(tmp_path: Path) -> None:
    _corrupt_and_check(tmp_path, _flip_tensor_byte)


def test_truncated_file_is_detected(tmp_path: Path) -> None:
    _corrupt_and_check(tmp_path, lambda p: os.truncate(p, p.stat().st_size // 2))


def test_missing_file_is_detected(tmp_path: Path) -> None:
    _corrupt_and_check(tmp_path, lambda p: p.unlink())


def test_garbage_header_is_detected(tmp_path: Path) -> None:
    def damage(p: Path) -> None:
        data = bytearray(p.read_bytes())
        data[9:20] = b"\xff" * 11
        p.write_bytes(bytes(data))

    _corrupt_and_check(tmp_path, damage)


def test_file_of_another_node_is_detected(tmp_path: Path) -> None:
    # Same tensors, so the checksum matches: only the file's own metadata can tell.
    with KVStore(tmp_path, fingerprint=FP) as s:
        s.put("a", make_kv(1), parent=None, start=0, token_ids=ids())
        s.put("b", make_kv(1), parent=None, start=0, token_ids=ids(5, 9))
        node_file(s, "b").write_bytes(node_file(s, "a").read_bytes())
        assert s.get("b") is None and s.stats().corrupt == 1
        assert_same(s.get("a"), make_kv(1))


def test_file_of_another_fingerprint_is_detected(tmp_path: Path) -> None:
    with KVStore(tmp_path, fingerprint="model-a") as a, KVStore(tmp_path, fingerprint="model-b") as b:
        a.put("k", make_kv(1), parent=None, start=0, token_ids=ids())
        b.put("k", make_kv(1), parent=None, start=0, token_ids=ids())
        node_file_b = next(p for p in (tmp_path / "kv").rglob("k.safetensors")
                           if p != node_file_of(a, "k"))
        node_file_b.write_bytes(node_file_of(a, "k").read_bytes())
        assert b.get("k") is None and b.stats().corrupt == 1
        assert a.get("k") is not None


def test_reshaped_tensors_are_detected(tmp_path: Path) -> None:
    # Same bytes, same metadata, same checksum: only the recorded layout can tell.
    with KVStore(tmp_path, fingerprint=FP) as s:
        s.put("a", make_kv(), parent=None, start=0, token_ids=ids())
        path = node_file(s, "a")
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata()
            tensors = {name: f.get_tensor(name).reshape(2, 10, 2) for name in f.keys()}
        save_file(tensors, str(path), metadata=meta)
        assert s.get("a") is None and s.stats().corrupt == 1


def test_verify_off_still_checks_structure(tmp_path: Path) -> None:
    with KVStore(tmp_path, fingerprint=FP, verify=False) as s:
        s.put("a", make_kv(), parent=None, start=0, token_ids=ids())
        p = node_file(s, "a")
        os.truncate(p, p.stat().st_size - 3)
        assert s.get("a") is None and s.stats().corrupt == 1


def test_token_ids_mismatch_is_a_miss(store: KVStore) -> None:
    store.put("a", make_kv(), parent=None, start=0, token_ids=ids())
    assert store.get("a", token_ids=ids(5, 1)) is None
    st = store.stats()
    assert (st.misses, st.hits, st.corrupt) == (1, 0, 1)
    assert not store.contains("a")  # stale entry removed so the right K/V can be stored
    assert store.put("a", make_kv(), parent=None, start=0, token_ids=ids(5, 1)) is True


def test_directory_mode_0700(tmp_path: Path) -> None:
    root = tmp_path / "new" / "store"
    old = os.umask(0o022)
    try:
        KVStore(root, fingerprint=FP).close()
    finally:
        os.umask(old)
    for d in (root, root / "kv", *[p for p in (root / "kv").iterdir() if p.is_dir()]):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


def test_unusable_paths_raise_naming_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="plain-file"):
        KVStore(blocker / "store", fingerprint=FP)
    with pytest.raises(ValueError, match="plain-file"):
        KVStore(blocker, fingerprint=FP)


@pytest.mark.parametrize("build", [
    lambda: ChunkKV((torch.zeros(2, 3),), (torch.zeros(2, 3, 4),)),              # 2-D
    lambda: ChunkKV((torch.zeros(1, 3, 4),) * 2, (torch.zeros(1, 3, 4),)),       # layer counts
    lambda: ChunkKV((torch.zeros(1, 3, 4),), (torch.zeros(1, 4, 4),)),           # n_tokens
    lambda: ChunkKV((torch.zeros(1, 3, 4), torch.zeros(1, 2, 4)), (torch.zeros(1, 3, 4),) * 2),
    lambda: ChunkKV((), ()),
    lambda: ChunkKV(([[1.0]],), (torch.zeros(1, 1, 1),)),                        # not a tensor
])
def test_bad_chunk_shapes_raise(build) -> None:
    with pytest.raises(ValueError, match="ChunkKV"):
        build()


def test_bad_put_arguments_raise(store: KVStore) -> None:
    kv = make_kv()
    with pytest.raises(ValueError, match="token ids"):
        store.put("a", kv, parent=None, start=0, token_ids=ids(4))
    with pytest.raises(ValueError, match="invalid node key"):
        store.put("../evil", kv, parent=None, start=0, token_ids=ids())
    with pytest.raises(ValueError, match="start"):
        store.put("a", kv, parent=None, start=-1, token_ids=ids())
    with pytest.raises(ValueError, match="own parent"):
        store.put("a", kv, parent="a", start=0, token_ids=ids())
    store.put("b", kv, parent="a", start=0, token_ids=ids())
    with pytest.raises(ValueError, match="cycle"):
        store.put("a", kv, parent="b", start=0, token_ids=ids())
    with pytest.raises(ValueError, match="byte_limit"):
        store.set_byte_limit(-1)
    assert [n.key for n in store.nodes()] == ["b"]


def test_closed_store_raises(tmp_path: Path) -> None:
    s = KVStore(tmp_path, fingerprint=FP)
    s.close()
    with pytest.raises(RuntimeError, match="closed"):
        s.get("a")


def test_threads_share_one_store(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    with KVStore(tmp_path, fingerprint=FP) as s:
        def work(t: int) -> None:
            try:
                for i in range(8):
                    key = f"t{t}-{i}"
                    s.put(key, make_kv(i), parent=None, start=0, token_ids=ids())
                    assert_same(s.get(key, token_ids=ids()), make_kv(i))
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert s.stats().entries == 32 and s.stats().hits == 32


def test_find_by_tokens_lists_every_context_of_a_chunk(tmp_path: Path) -> None:
    with KVStore(tmp_path, fingerprint="model-a") as a, KVStore(tmp_path, fingerprint="model-b") as b:
        a.put("r", make_kv(), parent=None, start=0, token_ids=ids(5, 100))
        a.put("x1", make_kv(), parent=None, start=0, token_ids=ids())
        a.put("x2", make_kv(), parent="r", start=5, token_ids=ids())
        b.put("x3", make_kv(), parent=None, start=0, token_ids=ids())
        assert [n.key for n in a.find_by_tokens(ids())] == ["x1", "x2"]
        assert a.find_by_tokens(ids(5, 1)) == []


def test_open_sweeps_a_foreign_temp_file_left_by_a_kill(tmp_path: Path) -> None:
    """Regression: safetensors' save_file wrote through its own ".tmpXXXXXX" file, which a
    SIGKILL left behind under a name the sweep did not know."""
    with KVStore(tmp_path, fingerprint=FP) as s:
        s.put("a", make_kv(), parent=None, start=0, token_ids=ids())
        leftover = node_file(s, "a").parent / ".tmpn1RHNg"
    leftover.write_bytes(b"partial")
    with KVStore(tmp_path, fingerprint=FP) as s:
        assert not leftover.exists()
        assert s.get("a", token_ids=ids()) is not None
    assert not [p for p in (tmp_path / "kv").rglob(".tmp*")]


def test_prefetch_advises_the_files_of_stored_nodes_only(store: KVStore) -> None:
    store.put("a", make_kv(0), parent=None, start=0, token_ids=ids())
    store.put("b", make_kv(1), parent="a", start=5, token_ids=ids(offset=5))
    advised = store.prefetch(["a", "b", "missing"])
    assert advised == (0 if store.path is None else 2)
    assert_same(store.get("a", token_ids=ids()), make_kv(0))  # a prefetch serves nothing itself
