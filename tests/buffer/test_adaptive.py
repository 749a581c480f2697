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


def test_every_expert_replays_as_its_own_policy() -> None:
    # The shadows see every read and nothing else: each one's hits are its standalone hits.
    # (A key keeps its size: on a hit the policy is told the resident entry's size.)
    rng = random.Random(3)
    keys = [rng.randrange(60) if rng.random() < 0.7 else rng.randrange(8) for _ in range(3000)]
    trace = [(k, 1 + k % 4, rng.choice(["", "", "hot", "seq"])) for k in keys]
    for capacity in (8, 20, 45):
        _, p = run(trace, capacity)
        assert [e.name for e in p.experts] == ["llm-static", "lru", "lfu", "lecar"]
        for e in p.experts:
            assert e.hits == simulate(trace, e.name, capacity).hits, (capacity, e.name)


def test_a_change_of_leader_is_followed_within_a_few_loop_cycles() -> None:
    # Zipf popularity first (LFU leads), then a 40-block loop in a 20-block cache, which only
    # the classification's pinning serves (LFU keeps the popular keys of the first phase).
    rng = random.Random(0)
    weights = [1 / (r + 1) ** 1.2 for r in range(200)]
    zipf = [(1000 + rng.choices(range(200), weights)[0], 1, "") for _ in range(6000)]
    loop = [(b, 1, "") for _ in range(40) for b in range(40)]
    capacity = 20
    p = AdaptiveLLMPolicy(capacity)
    cache: BufferCache[int] = BufferCache(capacity, p)
    switched_at = None
    for i, (key, size, cls) in enumerate(zipf + loop):
        if i == len(zipf):
            assert p.leader == "lfu"
        if cache.lookup(key, cls) is None:
            cache.offer(key, key, size, cls)
        if i >= len(zipf) and switched_at is None and p.leader == "llm-static":
            switched_at = i - len(zipf)
            real0, static0 = cache.stats.hits, p.experts[0].hits
    assert switched_at is not None and switched_at <= 6 * 40  # measured: 169 reads
    # after the change, at most one miss per key the new leader holds that the cache lacked
    assert cache.stats.hits - real0 >= p.experts[0].hits - static0 - capacity
    # and over the whole trace the adaptive policy beats every expert alone
    assert cache.stats.hits > max(simulate(zipf + loop, e.name, capacity).hits for e in p.experts)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="half_life"):
        AdaptiveLLMPolicy(10, half_life=0)
    with pytest.raises(ValueError, match="capacity"):
        AdaptiveLLMPolicy(-1)
