"""The RAM tier as a plugin around the K/V load hook (``Config.ram_cache_bytes``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..hooks.specs import hookimpl
from ..kv.join_buffer import JoinBuffers
from .policies import BUILTIN_POLICIES, PolicyFactory
from .ram_tier import KVRamTier

if TYPE_CHECKING:
    from ..hooks.contexts import AssistantContext, EngineContext
    from ..kv.store import ChunkKV
    from ..segments import Prompt
    from ..stats import Generation, GenerationStats

__all__ = ["RamTierKV"]


class RamTierKV:
    """Serve ``percache_load_chunk`` from a :class:`KVRamTier` of ``ctx.config.ram_cache_bytes``
    bytes (policy ``ctx.config.ram_cache_policy``, from the handle's registry of buffer-cache
    policies, which this plugin fills with the built-ins); defers to the store's loader when the budget
    is 0 or the store does not hold the node."""

    def __init__(self) -> None:
        self.tier: KVRamTier | None = None
        self.joins: JoinBuffers | None = None

    def _tier(self, ctx: EngineContext) -> KVRamTier:
        budget, policy = ctx.config.ram_cache_bytes, ctx.config.ram_cache_policy
        t = self.tier
        if t is None or t.cache.capacity != budget or t.policy_name != policy:
            if t is not None:
                t.close()
            t = self.tier = KVRamTier(ctx.store, budget, policy, policies=ctx.buffer_policies)
        elif t.store is not ctx.store:  # other weights in use: keep what the tier holds
            t.bind(ctx.store)
        return t

    @hookimpl(tryfirst=True)
    def percache_register_buffer_policies(self, register: Callable[[str, PolicyFactory], None]) -> None:
        """The built-in policies: ``llm``, ``lru``, ``lfu``, ``lecar``."""
        for name, factory in BUILTIN_POLICIES.items():
            register(name, factory)

    @hookimpl(tryfirst=True)
    def percache_load_chunk(self, ctx: EngineContext, key: str, token_ids: tuple[int, ...],
                            layered: bool) -> ChunkKV | None:
        if not ctx.config.ram_cache_bytes:
            if self.tier is not None:
                self.tier.close()
                self.tier = None
            return None
        return self._tier(ctx).get(key, token_ids, layered=layered)

    @hookimpl(tryfirst=True)
    def percache_load_head(self, ctx: EngineContext, name: str, version: tuple[object, ...],
                           load: Callable[[], ChunkKV | None]) -> ChunkKV | None:
        """A persona head snapshot from RAM while its row is ``version`` (``KVRamTier.get_other``)."""
        if not ctx.config.ram_cache_bytes:
            return None
        return self._tier(ctx).get_other(("head", name), version, load)

    @hookimpl(tryfirst=True)
    def percache_join_buffers(self, ctx: EngineContext) -> JoinBuffers | None:
        """The tier's join buffers (``Config.ram_join_buffers``, with the tier on)."""
        if not (ctx.config.ram_cache_bytes and ctx.config.ram_join_buffers):
            self.joins = None
            return None
        if self.joins is None:
            self.joins = JoinBuffers()
        return self.joins

    @hookimpl(tryfirst=True)
    def percache_prefetch_chunks(self, ctx: EngineContext, keys: tuple[str, ...]) -> bool | None:
        """Prefetch from the store only the nodes the tier does not hold."""
        if not ctx.config.ram_cache_bytes:
            return None
        self._tier(ctx).prefetch(keys)
        return True

    @hookimpl
    def percache_request_end(self, ctx: EngineContext, prompt: Prompt, stats: GenerationStats,
                             generation: Generation | None) -> None:
        """Offer the chunks the request read in the background (``KVRamTier.settle``)."""
        if self.tier is not None:
            self.tier.settle()

    @hookimpl
    def percache_close(self, ctx: AssistantContext) -> None:
        """Free the tier's memory and stop listening to the store."""
        if self.tier is not None:
            self.tier.close()
            self.tier = None
        self.joins = None

    def ram_tier_stats(self) -> dict[str, float]:
        """Hits (``shared``: of them, served with an in-memory store's own tensors, nothing held), misses
        (``bypassed``: of them, chunks not kept), bytes and hit ratio of the tier, and the bytes, reuses, fresh
        allocations and busy misses of its join buffers (empty before the first load)."""
        if self.tier is None:
            return {}
        s, j = self.tier.stats, self.joins
        return {"hits": s.hits, "misses": s.misses, "stale": self.tier.stale, "shared": self.tier.shared,
                "evictions": s.evictions, "bypassed": s.bypassed, "bytes": self.tier.cache.used, "hit_ratio": s.hit_ratio,
                "join_bytes": j.nbytes if j else 0, "join_reuses": j.stats.reuses if j else 0,
                "join_allocations": j.stats.allocations if j else 0, "join_busy": j.stats.busy if j else 0}

