import random

import pytest

from percache_plugin.buffer import BufferCache, simulate
from percache_plugin.buffer.adaptive import AdaptiveLLMPolicy


def run(trace: list[tuple[int, int, str]], capacity: int) -> tuple[int, AdaptiveLLMPolicy]:
    p = AdaptiveLLMPolicy(capacity)
    cache: BufferCache[int] = BufferCache(capacity, p)
    for key, size, cls in trace:
        if cache.lookup(key, cls) is None:
            cache.offer(key, key, size, cls)
        assert cache.used <= capacity
    return cache.stats.hits, p


def test_on_a_loop_it_pins_like_the_seed_policy() -> None:
    trace = [(b, 1, "") for _ in range(12) for b in range(10)]
    hits, p = run(trace, 6)
    assert simulate(trace, "lru", 6).hits == 0
    assert hits == simulate(trace, "llm-static", 6).hits > 0
    assert p.leader == "llm-static" and p.switches == 0


def test_where_frequency_wins_it_follows_lfu() -> None:
    # Zipf-like popularity over 200 keys, no loop: LFU's counts beat the classification.
    rng = random.Random(0)
    weights = [1 / (r + 1) ** 1.2 for r in range(200)]
    trace = [(rng.choices(range(200), weights)[0], 1, "") for _ in range(6000)]
    static, lfu = simulate(trace, "llm-static", 10).hits, simulate(trace, "lfu", 10).hits
    assert lfu > static
    hits, p = run(trace, 10)
    assert p.leader == "lfu"
    assert hits > static and hits >= 0.97 * lfu


def test_a_missed_key_the_leader_would_not_hold_is_not_admitted() -> None:
    cache: BufferCache[int] = BufferCache(3, AdaptiveLLMPolicy(3))
    for b in range(3):
        cache.offer(b, b, 1, "hot")
    assert not cache.offer(99, 99, 1, "seq")  # the seed policy caches sequential reads only in free space
    assert all(b in cache for b in range(3))


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="half_life"):
        AdaptiveLLMPolicy(10, half_life=0)
    with pytest.raises(ValueError, match="capacity"):
        AdaptiveLLMPolicy(-1)
