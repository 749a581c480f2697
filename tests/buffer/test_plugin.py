from pathlib import Path

import pytest

import percache_plugin as percache
from percache_plugin.buffer.plugin import RamTierKV
from percache_plugin.buffer.policies import LRUPolicy
from percache_plugin.config import ConfigError
from percache_plugin.kv.join_buffer import JoinBuffers
from tests.helpers import SEGMENTS, tiny_pair

GEN = {"max_new_tokens": 4, "do_sample": False}


def ram_plugin(pc) -> RamTierKV:
    return next(p for p in pc.plugins.get_plugins() if isinstance(p, RamTierKV))


def test_ram_tier_serves_repeated_requests_with_the_same_tokens(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path / "s", ram_cache_bytes=1 << 24)
    cold = pc.generate(SEGMENTS, **GEN)
    first = pc.generate(SEGMENTS, **GEN)  # store -> RAM
    loaded = pc.store.stats().bytes_loaded
    again = pc.generate(SEGMENTS, **GEN)  # RAM only
    assert cold.token_ids == first.token_ids == again.token_ids
    assert again.stats.tokens_reused == first.stats.tokens_reused > 0
    assert pc.store.stats().bytes_loaded == loaded
    assert (first.stats.ram_hits, first.stats.ram_misses) == (0, first.stats.nodes_reused)
    assert (again.stats.ram_hits, again.stats.ram_misses) == (again.stats.nodes_reused, 0)
    assert again.stats.ram_bytes == again.stats.bytes_loaded > 0 and first.stats.ram_bytes == 0
    assert "ram_hits=" in again.stats.summary()
    assert pc.stats().ram_hits == again.stats.ram_hits
    plugin = ram_plugin(pc)
    stats = plugin.ram_tier_stats()
    assert stats["hits"] == first.stats.nodes_reused and stats["bytes"] > 0
    pc.close()
    assert plugin.tier is None


def test_budget_zero_turns_the_tier_off(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path / "s", ram_cache_bytes=0)
    pc.generate(SEGMENTS, **GEN)
    g = pc.generate(SEGMENTS, **GEN)
    assert ram_plugin(pc).tier is None
    assert g.stats.nodes_reused > 0 and (g.stats.ram_hits, g.stats.ram_misses, g.stats.ram_bytes) == (0, 0, 0)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bad_budget_is_named(bad: object) -> None:
    with pytest.raises(ConfigError, match="ram_cache_bytes"):
        percache.Config(ram_cache_bytes=bad)  # type: ignore[arg-type]


def test_unknown_policy_is_named() -> None:
    with pytest.raises(ConfigError, match="ram_cache_policy"):
        percache.Config(ram_cache_policy="")
    model, tok = tiny_pair("llama")
    with pytest.raises(ConfigError, match="ram_cache_policy.*'fifo'.*lecar"):
        percache.enable(model, tok, ram_cache_policy="fifo")
    pc = percache.enable(model, tok)
    with pytest.raises(ConfigError, match="ram_cache_policy"):
        pc.configure(ram_cache_policy="fifo")
    assert pc.config.ram_cache_policy == "llm"
    pc.close()


class CountingLRU(LRUPolicy):
    made: list[int] = []

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.made.append(capacity)


class FifoPolicies:
    """A third-party plugin adding a RAM-tier policy by name."""

    @percache.hookimpl
    def percache_register_buffer_policies(self, register) -> None:
        register("counting-lru", CountingLRU)


def test_a_plugin_registers_a_policy_the_tier_uses(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    CountingLRU.made.clear()
    pc = percache.enable(model, tok, store=tmp_path / "s", ram_cache_bytes=1 << 20,
                         ram_cache_policy="counting-lru", plugins=[FifoPolicies()])
    assert set(pc.engine.registries.buffer_policies) == {"counting-lru", "lecar", "lfu", "llm", "llm-static", "lru"}
    pc.generate(SEGMENTS, **GEN)
    pc.generate(SEGMENTS, **GEN)
    again = pc.generate(SEGMENTS, **GEN)
    assert again.stats.ram_hits > 0 and CountingLRU.made == [1 << 20]
    assert isinstance(ram_plugin(pc).tier.cache.policy, CountingLRU)
    pc.configure(ram_cache_policy="lfu")  # a built-in again: a new tier
    pc.generate(SEGMENTS, **GEN)
    assert ram_plugin(pc).tier.cache.policy.name == "lfu"
    pc.close()


class _Recording(JoinBuffers):
    """Join buffers that record every shape asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def take(self, slot, shape, dtype, device):  # type: ignore[no-untyped-def]
        self.shapes.append(tuple(shape))
        return super().take(slot, shape, dtype, device)


def test_ram_hits_join_once_per_layer_into_memory_lent_again(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    layers = model.config.num_hidden_layers
    off = percache.enable(model, tok, store=tmp_path / "a", ram_cache_bytes=1 << 24, ram_join_buffers=False)
    want = [off.generate(SEGMENTS, **GEN).token_ids for _ in range(3)]
    assert ram_plugin(off).ram_tier_stats()["join_bytes"] == 0
    off.close()
    pc = percache.enable(model, tok, store=tmp_path / "b", ram_cache_bytes=1 << 24)
    plugin = ram_plugin(pc)
    got = [pc.generate(SEGMENTS, **GEN).token_ids for _ in range(2)]  # cold, then store -> RAM
    plugin.joins = rec = _Recording()
    g = pc.generate(SEGMENTS, **GEN)  # RAM only
    assert [*got, g.token_ids] == want  # the same tokens as without the buffers
    assert g.stats.ram_hits == g.stats.nodes_reused > 0
    # One join per layer for keys and values, over the cached prefix and the new tokens at
    # once: a join of the chunks alone (an intermediate copy) would ask for the prefix only.
    assert len(rec.shapes) == 2 * layers
    assert {s[-2] for s in rec.shapes} == {g.stats.prompt_tokens}
    assert (rec.stats.allocations, rec.stats.reuses) == (2 * layers, 0)
    pc.generate(SEGMENTS, **GEN)
    stats = plugin.ram_tier_stats()
    assert (stats["join_allocations"], stats["join_reuses"], stats["join_busy"]) == (2 * layers, 2 * layers, 0)
    assert stats["join_bytes"] == rec.nbytes > 0
    pc.close()
    assert plugin.joins is None


def test_bad_join_buffers_flag_is_named() -> None:
    with pytest.raises(ConfigError, match="ram_join_buffers"):
        percache.Config(ram_join_buffers=1)  # type: ignore[arg-type]
