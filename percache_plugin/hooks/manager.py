"""The plugin manager and a typed façade over its hook calls."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

from . import specs
from .blame import BlamingRelay, observe
from .specs import PROJECT

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ..attention.masks import MaskFunction
    from ..attention.profile import ModelProfile
    from ..buffer.policies import PolicyFactory
    from ..core.query import Query
    from ..decode.sources import DraftHints, DraftSource
    from ..kv.edit import CacheEditor
    from ..kv.eviction import EvictionPolicy
    from ..kv.join_buffer import JoinBuffers
    from ..kv.planner import ReusePlan
    from ..kv.recompute import RecomputeContext, RecomputeStrategy
    from ..kv.store import ChunkKV
    from ..rag.chunking import Chunk
    from ..rag.knowledge import AddReport
    from ..rag.qa_bank import LookupResult
    from ..rag.qa_length import AnswerTokens
    from ..rag.qa_types import AllScopes, QAEntry
    from ..segments import Prompt, PromptPiece, Segment
    from ..session.state import Session, Turn
    from ..stats import Generation, GenerationStats
    from ..turnlog.record import TurnRecord
    from .contexts import AssistantContext, EngineContext

__all__ = ["DEFAULT_PLUGINS", "AUTOLOAD_ENV", "ENTRY_POINT_GROUP", "make_plugin_manager", "Hooks"]

AUTOLOAD_ENV = "PERCACHE_DISABLE_PLUGIN_AUTOLOAD"
ENTRY_POINT_GROUP = PROJECT

# "module:Class" of each built-in plugin; instantiated with no arguments, one per handle.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "percache_plugin.plugins.builtin:DefaultAttention",
    "percache_plugin.plugins.builtin:PromptBuilder",
    "percache_plugin.plugins.builtin:ExactPrefixPlanner",
    "percache_plugin.plugins.builtin:StoreBackedKV",
    "percache_plugin.buffer.plugin:RamTierKV",
    "percache_plugin.buffer.trace_plugin:KVTraceRecorder",
    "percache_plugin.plugins.builtin:ConfiguredRecompute",
    "percache_plugin.plugins.builtin:BuiltinEviction",
    "percache_plugin.plugins.banks:KnowledgeRetrieval",
    "percache_plugin.plugins.banks:QABankPlugin",
    "percache_plugin.memory.plugin:MemoryPlugin",
    "percache_plugin.plugins.builtin:BuiltinProfiles",
    "percache_plugin.plugins.builtin:RequestLog",
    "percache_plugin.plugins.session:OldestTurnsFirst",
    "percache_plugin.plugins.drafts:BuiltinDraftSources",
    "percache_plugin.assistant.idle_tasks:BuiltinIdleTasks",
)


def _load(spec: str) -> Any:
    import importlib

    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr)()


def make_plugin_manager(*, autoload: bool | None = None) -> pluggy.PluginManager:
    """A fresh manager: specs, the built-in plugins, then entry points (group ``percache``)
    unless ``PERCACHE_DISABLE_PLUGIN_AUTOLOAD`` is set to a non-empty value other than 0."""
    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(specs)
    for spec in DEFAULT_PLUGINS:
        pm.register(_load(spec), name=spec)
    if autoload is None:
        autoload = os.environ.get(AUTOLOAD_ENV, "") in ("", "0")
    if autoload:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    return pm


class Hooks:
    """Typed calls into the plugin manager (pluggy cannot type ``pm.hook.x``). An exception a
    plugin raises carries a note naming it (:mod:`.blame`); the observer hooks
    (``specs.OBSERVER_HOOKS``) return how many implementations raised instead of raising."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        self._hook: Any = BlamingRelay(pm)

    def attention(
        self,
        ctx: EngineContext,
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        kwargs: dict[str, Any],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        out = self._hook.percache_attention(
            ctx=ctx, module=module, query=query, key=key, value=value,
            attention_mask=attention_mask, kwargs=kwargs,
        )
        if out is None:
            raise RuntimeError("no plugin computed attention (was DefaultAttention unregistered?)")
        return out

    def build_prompt(self, ctx: EngineContext, segments: list[Segment]) -> Prompt:
        prompt = self._hook.percache_build_prompt(ctx=ctx, segments=segments)
        if prompt is None:
            raise RuntimeError("no plugin built the prompt (was PromptBuilder unregistered?)")
        return prompt

    def plain_prompt(self, ctx: EngineContext, token_ids: list[int]) -> Prompt:
        prompt = self._hook.percache_plain_prompt(ctx=ctx, token_ids=token_ids)
        if prompt is None or prompt.input_ids != token_ids:
            raise RuntimeError("no plugin cut the plain prompt into pieces over its own ids "
                               "(was PromptBuilder unregistered?)")
        return prompt

    def plan_reuse(self, ctx: EngineContext, prompt: Prompt) -> ReusePlan:
        from ..kv.planner import ReusePlan

        plan = self._hook.percache_plan_reuse(ctx=ctx, prompt=prompt)
        return plan if plan is not None else ReusePlan(note="no planner answered")

    def load_chunk(self, ctx: EngineContext, key: str, token_ids: tuple[int, ...], *,
                   layered: bool = False) -> ChunkKV | None:
        if layered and not self._wrappers_take("percache_load_chunk", "layered"):
            layered = False  # such a wrapper could read tensors still being read
        return self._hook.percache_load_chunk(ctx=ctx, key=key, token_ids=token_ids, layered=layered)

    def _wrappers_take(self, hook: str, arg: str) -> bool:
        """Whether every wrapper of ``hook`` declares ``arg``."""
        impls = getattr(self.pm.hook, hook).get_hookimpls()
        return all(arg in impl.argnames for impl in impls if impl.wrapper or impl.hookwrapper)

    def load_head(self, ctx: EngineContext, name: str, version: tuple[object, ...],
                  load: Callable[[], ChunkKV | None]) -> ChunkKV | None:
        return self._hook.percache_load_head(ctx=ctx, name=name, version=version, load=load)  # type: ignore[no-any-return]

    def join_buffers(self, ctx: EngineContext) -> JoinBuffers | None:
        return self._hook.percache_join_buffers(ctx=ctx)  # type: ignore[no-any-return]

    def prefetch_chunks(self, ctx: EngineContext, keys: tuple[str, ...]) -> None:
        if keys:
            self._hook.percache_prefetch_chunks(ctx=ctx, keys=keys)

    def select_recompute(
        self, ctx: EngineContext, prompt: Prompt, plan: ReusePlan, context: RecomputeContext
    ) -> list[int]:
        chosen = self._hook.percache_select_recompute(ctx=ctx, prompt=prompt, plan=plan, context=context)
        return sorted(set(int(p) for p in chosen)) if chosen is not None else []

    def store_chunk(self, ctx: EngineContext, key: str, piece: PromptPiece, parent: str | None,
                    kv: ChunkKV, exact: bool, extra: Mapping[str, str] | None = None) -> bool:
        """Whether a plugin handled the piece."""
        handled = self._hook.percache_store_chunk(ctx=ctx, key=key, piece=piece, parent=parent,
                                                  kv=kv, exact=exact, extra=dict(extra or {}))
        return bool(handled)

    def draft_sources(self, ctx: EngineContext, prompt: Prompt, hints: DraftHints) -> list[DraftSource]:
        """Every source every plugin offers, in hook order."""
        offered = self._hook.percache_draft_sources(ctx=ctx, prompt=prompt, hints=hints)
        return [src for found in offered if found for src in found]

    def request_start(self, ctx: EngineContext, prompt: Prompt) -> None:
        self._hook.percache_request_start(ctx=ctx, prompt=prompt)

    def request_end(self, ctx: EngineContext, prompt: Prompt, stats: GenerationStats,
                    generation: Generation | None) -> int:
        """How many implementations raised (an observer: logged, not raised)."""
        return observe(self.pm, "percache_request_end",
                       dict(ctx=ctx, prompt=prompt, stats=stats, generation=generation))

    def retrieve(self, ctx: AssistantContext, query: Query, k: int, scope: str | None) -> list[Chunk]:
        return list(self._hook.percache_retrieve(ctx=ctx, query=query, k=k, scope=scope) or [])

    def retrieve_batch(self, ctx: AssistantContext, queries: Sequence[Query], k: int,
                       scope: str | None) -> list[list[Chunk]]:
        """``retrieve`` of each query, by ``percache_retrieve_batch`` when every plugin taking
        part in ``percache_retrieve`` implements it too (none is bypassed), else one by one."""
        hook = self._hook
        batched = {id(i.plugin) for i in self.pm.hook.percache_retrieve_batch.get_hookimpls()}
        found = None
        if queries and all(id(i.plugin) in batched for i in self.pm.hook.percache_retrieve.get_hookimpls()):
            found = hook.percache_retrieve_batch(ctx=ctx, queries=list(queries), k=k, scope=scope)
        if found is None:
            return [self.retrieve(ctx, q, k, scope) for q in queries]
        if len(found) != len(queries):
            raise ValueError(f"percache_retrieve_batch returned {len(found)} results for {len(queries)} queries")
        return [list(chunks or []) for chunks in found]

    def resolve_chunks(self, ctx: AssistantContext, ids: Sequence[str]) -> list[Chunk] | None:
        """The chunks of ``ids`` in order, or None when no plugin knows all of them."""
        found = self._hook.percache_resolve_chunks(ctx=ctx, ids=list(ids))
        return None if found is None else list(found)

    def chunk_vectors(self, ctx: AssistantContext, chunks: Sequence[Chunk]) -> dict[str, np.ndarray]:
        """Stored vectors of the chunks a plugin knows, by id (none when no plugin does)."""
        return dict(self._hook.percache_chunk_vectors(ctx=ctx, chunks=list(chunks)) or {})

    def add_documents(self, ctx: AssistantContext, docs: Sequence[object], scope: str | None) -> AddReport:
        report = self._hook.percache_add_documents(ctx=ctx, docs=docs, scope=scope)
        if report is None:
            raise LookupError("no plugin adds documents (is the knowledge-bank plugin registered?)")
        return report

    def list_chunks(self, ctx: AssistantContext, scope: str | None) -> list[str]:
        """Ids of the indexed chunks of ``scope`` (every scope for None; none when no plugin lists)."""
        return list(self._hook.percache_list_chunks(ctx=ctx, scope=scope) or [])

    def qa_lookup(self, ctx: AssistantContext, query: Query, scope: str | None,
                  retrieved: Sequence[str], max_new_tokens: int | None = None) -> LookupResult | None:
        return self._hook.percache_qa_lookup(
            ctx=ctx, query=query, scope=scope, retrieved=retrieved, max_new_tokens=max_new_tokens)

    def qa_entries(self, ctx: AssistantContext, scope: str | None | AllScopes,
                   question: str | None = None) -> list[QAEntry]:
        """Stored QA entries (none when no plugin lists any)."""
        return list(self._hook.percache_qa_entries(ctx=ctx, scope=scope, question=question) or [])

    def qa_known(self, ctx: AssistantContext, query: Query, scope: str | None) -> bool:
        """Whether a plugin's QA bank already holds ``query`` (False when no plugin says)."""
        return bool(self._hook.percache_qa_known(ctx=ctx, query=query, scope=scope))

    def qa_similar(self, ctx: AssistantContext, query: Query, scope: str | None, tau: float,
                   k: int = 20) -> list[QAEntry]:
        """Stored paraphrases of ``query``, most similar first (none when no plugin lists any)."""
        return list(self._hook.percache_qa_similar(ctx=ctx, query=query, scope=scope, tau=tau, k=k) or [])

    def qa_mark_stale(self, ctx: AssistantContext, entry_ids: Sequence[int]) -> list[int]:
        """Ids taken out of service (none when no plugin holds them)."""
        return list(self._hook.percache_qa_mark_stale(ctx=ctx, entry_ids=list(entry_ids)) or [])

    def qa_correct(self, ctx: AssistantContext, entry_id: int, answer: str) -> QAEntry:
        entry = self._hook.percache_qa_correct(ctx=ctx, entry_id=entry_id, answer=answer)
        if entry is None:
            raise LookupError(f"no QA-bank plugin holds entry {entry_id} (is one registered?)")
        return entry

    def qa_stats(self, ctx: AssistantContext) -> dict[str, object]:
        """The QA bank's counters (``lookups`` and ``hits`` 0 when no plugin reports)."""
        return dict(self._hook.percache_qa_stats(ctx=ctx) or {"lookups": 0, "hits": 0})

    def configured(self, ctx: AssistantContext, changed: set[str] | frozenset[str]) -> None:
        self._hook.percache_configured(ctx=ctx, changed=frozenset(changed))

    def qa_store(self, ctx: AssistantContext, query: Query, answer: str | None, scope: str | None,
                 sources: Sequence[str], origin: str = "user",
                 tokens: AnswerTokens | None = None) -> int:
        """How many implementations raised (a cache write: logged, not raised)."""
        return observe(self.pm, "percache_qa_store",
                       dict(ctx=ctx, query=query, answer=answer, scope=scope, sources=sources,
                            origin=origin, tokens=tokens))

    def documents_added(self, ctx: AssistantContext, report: AddReport) -> None:
        self._hook.percache_documents_added(ctx=ctx, report=report)

    def sources_forgotten(self, ctx: AssistantContext, ids: Sequence[str]) -> int:
        """How many derived items (stored answers, ...) the plugins removed."""
        return sum(n for n in self._hook.percache_sources_forgotten(ctx=ctx, ids=list(ids)) if n)

    def close(self, ctx: AssistantContext) -> None:
        self._hook.percache_close(ctx=ctx)

    def register_recompute_strategies(self, register: Callable[[str, RecomputeStrategy], None]) -> None:
        self._hook.percache_register_recompute_strategies(register=register)

    def register_eviction_policies(self, register: Callable[[str, EvictionPolicy], None]) -> None:
        self._hook.percache_register_eviction_policies(register=register)

    def register_buffer_policies(self, register: Callable[[str, PolicyFactory], None]) -> None:
        self._hook.percache_register_buffer_policies(register=register)

    def register_model_profiles(self, register: Callable[[str, ModelProfile], None]) -> None:
        self._hook.percache_register_model_profiles(register=register)

    def register_idle_tasks(self, register: Callable[[str, Any], None]) -> None:
        self._hook.percache_register_idle_tasks(register=register)

    def mask_function(self, ctx: EngineContext) -> MaskFunction | None:
        """Every plugin's extra mask, ANDed into one (None: no plugin masks anything)."""
        fns = [f for f in self._hook.percache_mask_function(ctx=ctx) if f is not None]
        if not fns:
            return None
        if len(fns) == 1:
            return fns[0]  # type: ignore[no-any-return]
        from transformers.masking_utils import and_masks

        return and_masks(*fns)  # type: ignore[no-any-return]

    def edit_cache(self, ctx: EngineContext, session: Session, editor: CacheEditor) -> None:
        self._hook.percache_edit_cache(ctx=ctx, session=session, editor=editor)

    def select_eviction(self, ctx: EngineContext, session: Session, need: int) -> list[int] | None:
        chosen = self._hook.percache_select_eviction(ctx=ctx, session=session, need=need)
        return None if chosen is None else [int(t) for t in chosen]

    def turn_relevance(self, ctx: EngineContext, session: Session, turn: Turn, message: str) -> float:
        score = self._hook.percache_turn_relevance(ctx=ctx, session=session, turn=turn, message=message)
        return 0.0 if score is None else float(score)

    def session_saved(self, ctx: EngineContext, session: Session, turn_id: int) -> int:
        """How many implementations raised (an observer: logged, not raised)."""
        return observe(self.pm, "percache_session_saved", dict(ctx=ctx, session=session, turn_id=turn_id))

    def session_loaded(self, ctx: EngineContext, session: Session, source: str) -> None:
        self._hook.percache_session_loaded(ctx=ctx, session=session, source=source)

    def turn_logged(self, ctx: EngineContext, record: TurnRecord) -> int:
        """How many implementations raised (an observer: logged, not raised)."""
        return observe(self.pm, "percache_turn_logged", dict(ctx=ctx, record=record))

    def model_profile(self, model: torch.nn.Module) -> Any:
        return self._hook.percache_model_profile(model=model)
