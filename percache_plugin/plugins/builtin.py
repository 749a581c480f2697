"""The built-in behaviour, as plugins registered exactly like third-party ones."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..attention.gqa import grouped_sdpa
from ..attention.hook_probe import eager_forward_of
from ..attention.profile import PROFILES, ModelProfile
from ..hooks.specs import hookimpl
from ..kv.blocks import block_prompt
from ..kv.eviction import BUILTIN_POLICIES, EvictionPolicy
from ..kv.planner import ReusePlan, longest_cached_prefix, plan_shifted
from ..kv.recompute import STRATEGIES, RecomputeContext, RecomputeStrategy, parse_strategy
from ..segments import build_prompt

if TYPE_CHECKING:
    from ..hooks.contexts import EngineContext
    from ..kv.store import ChunkKV
    from ..segments import Prompt, PromptPiece, Segment
    from ..stats import Generation, GenerationStats

__all__ = ["DefaultAttention", "PromptBuilder", "BuiltinProfiles", "ExactPrefixPlanner", "ConfiguredRecompute", "BuiltinEviction",
           "StoreBackedKV", "RequestLog"]

log = logging.getLogger("percache")


class DefaultAttention:
    """sdpa, or the model's eager attention where it does not support sdpa (Gemma2). sdpa keeps
    grouped key/value heads ungrouped where transformers would copy them (``attention/gqa.py``)."""

    @hookimpl(trylast=True)
    def percache_attention(
        self,
        ctx: EngineContext,
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        kwargs: dict[str, Any],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        fn = grouped_sdpa if ctx.capabilities.attention_backend == "sdpa" else eager_forward_of(module)
        return fn(module, query, key, value, attention_mask, **kwargs)


class PromptBuilder:
    """Each segment tokenized on its own, glued by the chat template (or the plain layout)."""

    @hookimpl(trylast=True)
    def percache_build_prompt(self, ctx: EngineContext, segments: list[Segment]) -> Prompt:
        return build_prompt(segments, ctx.tokenizer, fingerprint=ctx.fingerprint,
                            use_template=ctx.use_template, separator=ctx.config.chunk_separator)

    @hookimpl(trylast=True)
    def percache_plain_prompt(self, ctx: EngineContext, token_ids: list[int]) -> Prompt:
        return block_prompt(token_ids, ctx.config.prefix_block_tokens, ctx.fingerprint)


class ExactPrefixPlanner:
    """Serve the longest exactly cached chunk prefix; with ``reuse="shifted"`` on a model that
    supports it, also every later chunk the store holds at another position, stored by a prompt
    of the same scope (``kv.planner.plan_shifted``)."""

    @hookimpl(trylast=True)
    def percache_plan_reuse(self, ctx: EngineContext, prompt: Prompt) -> ReusePlan:
        if not ctx.config.use_kv:
            return ReusePlan(note="use_kv is off")
        plan = longest_cached_prefix(prompt, ctx.store)
        if ctx.config.reuse == "shifted" and ctx.capabilities.shifted_reuse:
            plan = plan_shifted(prompt, ctx.store, plan)
        return plan


class ConfiguredRecompute:
    """The recompute strategy named by ``ctx.config.recompute``, from the handle's registry
    (the built-in strategies, then any a plugin registers)."""

    @hookimpl(tryfirst=True)
    def percache_register_recompute_strategies(self, register: Callable[[str, RecomputeStrategy], None]) -> None:
        for name, strategy in STRATEGIES.items():
            register(name, strategy)

    @hookimpl(trylast=True)
    def percache_select_recompute(
        self, ctx: EngineContext, prompt: Prompt, plan: ReusePlan, context: RecomputeContext
    ) -> list[int]:
        return parse_strategy(ctx.config.recompute, ctx.recompute_strategies)(context)


class BuiltinEviction:
    """The K/V store's built-in eviction policy, ``"lfu-leaves"`` (:mod:`..kv.eviction`)."""

    @hookimpl(tryfirst=True)
    def percache_register_eviction_policies(self, register: Callable[[str, EvictionPolicy], None]) -> None:
        for name, policy in BUILTIN_POLICIES.items():
            register(name, policy)


class StoreBackedKV:
    """Load and store chunk K/V through the K/V store of the context."""

    @hookimpl(trylast=True)
    def percache_load_chunk(self, ctx: EngineContext, key: str, token_ids: tuple[int, ...],
                            layered: bool) -> ChunkKV | None:
        return ctx.store.get(key, token_ids=token_ids, layered=layered)

    @hookimpl(trylast=True)
    def percache_load_head(self, ctx: EngineContext, name: str, version: tuple[object, ...],
                           load: Callable[[], ChunkKV | None]) -> ChunkKV | None:
        return load()

    @hookimpl(trylast=True)
    def percache_prefetch_chunks(self, ctx: EngineContext, keys: tuple[str, ...]) -> bool:
        ctx.store.prefetch(keys)
        return True

    @hookimpl(trylast=True)
    def percache_store_chunk(
        self, ctx: EngineContext, key: str, piece: PromptPiece, parent: str | None, kv: ChunkKV,
        exact: bool, extra: Mapping[str, str],
    ) -> bool:
        if not ctx.config.use_kv:
            return True
        extra = {**extra, "exact": "1" if exact else "0"}
        if piece.segment.id is not None:  # the knowledge-bank chunk: lets its K/V be removed with it
            extra["chunk"] = piece.segment.id
        ctx.store.put(key, kv, parent=parent, start=piece.start, token_ids=piece.token_ids,
                      extra=extra)
        return True


class BuiltinProfiles:
    """The model families percache knows (:data:`~percache_plugin.attention.profile.PROFILES`)."""

    @hookimpl(tryfirst=True)
    def percache_register_model_profiles(self, register: Callable[[str, ModelProfile], None]) -> None:
        for model_type, profile in PROFILES.items():
            register(model_type, profile)


class RequestLog:
    """One debug line per request (``Config(debug_log=True)``): what was reused."""

    @hookimpl
    def percache_request_end(self, ctx: EngineContext, prompt: Prompt, stats: GenerationStats,
                             generation: Generation | None) -> None:
        if ctx.config.debug_log:
            log.info("percache request: %s", stats.summary())
