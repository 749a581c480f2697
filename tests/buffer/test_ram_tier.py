import torch

from percache_plugin.buffer.ram_tier import KVRamTier
from percache_plugin.kv.store import ChunkKV, KVStore


def chunk(value: float, n: int = 4, layers: int = 2) -> ChunkKV:
    t = torch.full((2, n, 8), value)
    return ChunkKV(tuple(t.clone() for _ in range(layers)), tuple(t.clone() for _ in range(layers)))


IDS = (1, 2, 3, 4)


def test_hit_returns_the_held_tensors_without_reading_the_store(tmp_path) -> None:
    store = KVStore(tmp_path, fingerprint="fp")
    store.put("a", chunk(1.0), parent=None, start=0, token_ids=IDS)
    tier = KVRamTier(store, 1 << 20)
    first = tier.get("a", IDS)
    loaded = store.stats().bytes_loaded
    second = tier.get("a", IDS)
    assert all(a is b for a, b in zip(second.keys, first.keys, strict=True))
    assert store.stats().bytes_loaded == loaded
    assert tier.stats.hits == 1 and tier.stats.misses == 1
    assert (first.origin, second.origin) == ("store", "ram")


def test_rewritten_entry_is_never_served_stale(tmp_path) -> None:
    store = KVStore(tmp_path, fingerprint="fp")
    store.put("a", chunk(1.0), parent=None, start=0, token_ids=IDS)
    tier = KVRamTier(store, 1 << 20)
    assert float(tier.get("a", IDS).keys[0][0, 0, 0]) == 1.0
    store.delete("a")
    store.put("a", chunk(2.0), parent=None, start=0, token_ids=IDS)
    assert float(tier.get("a", IDS).keys[0][0, 0, 0]) == 2.0


def test_rewrite_by_another_store_handle_is_seen(tmp_path) -> None:
    # a second handle on the same directory (as another process would) does not notify the tier
    store = KVStore(tmp_path, fingerprint="fp")
    other = KVStore(tmp_path, fingerprint="fp")
    store.put("a", chunk(1.0), parent=None, start=0, token_ids=IDS)
    tier = KVRamTier(store, 1 << 20)
    tier.get("a", IDS)
    other.delete("a")
    assert tier.get("a", IDS) is None
    other.put("a", chunk(3.0), parent=None, start=0, token_ids=IDS)
    assert float(tier.get("a", IDS).keys[0][0, 0, 0]) == 3.0
    assert tier.stale == 0  # the removal was seen first
    other.delete("a")
    other.put("a", chunk(4.0), parent=None, start=0, token_ids=IDS)
    assert float(tier.get("a", IDS).keys[0][0, 0, 0]) == 4.0 and tier.stale == 1


def test_removal_frees_the_ram_copy(tmp_path) -> None:
    store = KVStore(tmp_path, fingerprint="fp")
    store.put("a", chunk(1.0), parent=None, start=0, token_ids=IDS)
    tier = KVRamTier(store, 1 << 20)
    tier.get("a", IDS)
    assert tier.cache.used > 0
    store.delete("a")
    assert tier.cache.used == 0 and tier.get("a", IDS) is None


def test_other_token_ids_are_not_served(tmp_path) -> None:
    store = KVStore(None, fingerprint="fp")
    store.put("a", chunk(1.0), parent=None, start=0, token_ids=IDS)
    tier = KVRamTier(store, 1 << 20)
    tier.get("a", IDS)
    assert tier.get("a", (9, 9, 9, 9)) is None


def test_eviction_keeps_the_budget(tmp_path) -> None:
    store = KVStore(tmp_path, fingerprint="fp")
    size = chunk(0.0).nbytes
    for i in range(6):
        store.put(f"k{i}", chunk(float(i)), parent=None, start=0, token_ids=IDS)
    tier = KVRamTier(store, 3 * size, "lru")
    for i in range(6):
        assert float(tier.get(f"k{i}", IDS).keys[0][0, 0, 0]) == float(i)
        assert tier.cache.used <= 3 * size
    assert len(tier.cache) == 3 and tier.stats.evictions == 3
    assert [tier.holds(f"k{i}") for i in range(6)] == [False] * 3 + [True] * 3


def test_ram_hits_count_for_the_stores_eviction(tmp_path) -> None:
    # "hot" is read once from the store, then served from RAM; "warm" is read from the store
    # twice. Without RAM hits reaching the store, LFU eviction would drop the hot node first.
    store = KVStore(tmp_path, fingerprint="fp")
    for key in ("hot", "warm", "cold"):
        store.put(key, chunk(1.0), parent=None, start=0, token_ids=IDS)
    store.set_byte_limit(store.total_bytes())  # room for three nodes
    tier = KVRamTier(store, 1 << 20)
    for _ in range(10):
        assert tier.get("hot", IDS) is not None
    assert tier.stats.hits == 9
    store.get("warm", token_ids=IDS)
    store.get("warm", token_ids=IDS)
    store.put("new", chunk(2.0), parent=None, start=0, token_ids=IDS)  # over the limit: one goes
    assert store.contains("hot") and store.contains("warm") and not store.contains("cold")
    store.put("newer", chunk(3.0), parent=None, start=0, token_ids=IDS)
    assert store.contains("hot") and not store.contains("new")
    assert {n.key: n.hits for n in store.nodes()}["hot"] == 10


def test_ram_hits_are_buffered_not_written_one_by_one(tmp_path) -> None:
    store = KVStore(tmp_path, fingerprint="fp")
    store.put("a", chunk(1.0), parent=None, start=0, token_ids=IDS)
    tier = KVRamTier(store, 1 << 20)
    tier.get("a", IDS)
    tier.get("a", IDS)
    assert store.info("a").hits == 1  # the RAM hit is pending
    assert [n.hits for n in store.nodes()] == [2]  # listing the nodes writes it
    for _ in range(64):
        tier.get("a", IDS)
    assert store.info("a").hits == 66  # 64 pending hits are written at once
    assert store.stats().hits == 1  # the store's own counter: reads of the store only


def test_prefetch_asks_the_store_only_for_nodes_not_held(tmp_path, monkeypatch) -> None:
    store = KVStore(tmp_path, fingerprint="fp")
    store.put("a", chunk(1.0), parent=None, start=0, token_ids=IDS)
    store.put("b", chunk(2.0), parent="a", start=4, token_ids=IDS)
    tier = KVRamTier(store, 1 << 20)
    tier.get("a", IDS)
    asked: list[list[str]] = []
    monkeypatch.setattr(store, "prefetch", lambda keys: asked.append(list(keys)) or len(keys))
    assert tier.prefetch(["a", "b"]) == 1
    assert asked == [["b"]]
