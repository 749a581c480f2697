"""Every percache hook, in one place.

Plugins implement these with ``@percache_plugin.hookimpl``. Built-in behaviour is itself a set of
plugins (``hooks.manager.DEFAULT_PLUGINS``) registered ``trylast``, so a plugin registered later
runs first and may replace it (``firstresult`` hooks) or wrap it (``@hookimpl(wrapper=True)``).
Hook calls go through the typed façade :class:`percache_plugin.hooks.manager.Hooks`.

No hook receives the handle: engine-side hooks get an
:class:`~percache_plugin.hooks.contexts.EngineContext` (settings, K/V store, capabilities, hooks)
and the ask() pipeline's hooks an :class:`~percache_plugin.hooks.contexts.AssistantContext`
(settings, embedder, idle queue, hooks), both as ``ctx``.

An exception a plugin raises in a hook carries a note naming the plugin and the hook
(``percache: raised in plugin 'mypkg.MyPlugin' (percache_store_chunk)``) and propagates, except
from the hooks in :data:`OBSERVER_HOOKS`: they run once the answer is computed and stored (or
write the QA bank, a cache write), and nothing they return changes it, so like a failed cache
write an implementation that raises is logged with its plugin's name, counted in
``stats.plugin_errors`` (and ``pc.stats()``), and the other implementations still run; the
request returns its answer. ``percache_request_start`` and ``percache_session_loaded`` observe
too but run before the answer: they raise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

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

__all__ = ["PROJECT", "hookspec", "hookimpl", "HOOK_NAMES", "OBSERVER_HOOKS"]

PROJECT = "percache"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec(firstresult=True)
def percache_attention(  # type: ignore[empty-body]  # a specification: plugins implement it
    ctx: EngineContext,
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    kwargs: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Compute one layer's attention. firstresult.

    Called once per attention layer per forward while the handle is enabled. The default
    (registered ``trylast``) is sdpa, or the model's own eager attention where the model does not
    support sdpa (e.g. Gemma2's softcapping). Wrap it with ``@hookimpl(wrapper=True)`` to capture Q,
    alter the mask or collect statistics; return a result to replace it.

    :param ctx: the engine context (``ctx.capabilities.attention_backend``).
    :param module: the attention module; ``module.layer_idx`` is its layer.
    :param query: ``[batch, heads, q_len, head_dim]``, post-norm, post-RoPE.
    :param key: ``[batch, kv_heads, kv_len, head_dim]``, after the cache update (includes cached K).
    :param value: like ``key``.
    :param attention_mask: the mask built by the registered mask function (may be None when causal
        attention needs none).
        During a splice (shifted reuse) it is already the mask built from the true positions.
    :param kwargs: the remaining keyword arguments of the attention call (``scaling``, ``dropout``,
        ``sliding_window``, ``softcap``, ``position_ids`` ...); mutate to pass changes on.
    :return: ``(attn_output [batch, q_len, heads, head_dim], attn_weights or None)``.
    """


@hookspec(firstresult=True)
def percache_build_prompt(ctx: EngineContext, segments: list[Segment]) -> Prompt | None:
    """Turn a request's segments into prompt pieces with prefix-tree keys. firstresult.

    The default tokenizes every segment on its own (``ctx.tokenizer``, the chat template when
    ``ctx.use_template``) so a chunk's ids do not depend on its neighbours. A plugin that has
    token ids already, or renders turns its own way, returns
    :func:`percache_plugin.segments.chain_pieces` of its ids so the keys match the store's.
    A scoped request's keys (``pc.ask(scope=...)`` and that scope's idle work) are chained again
    from the scope's root after this hook (:func:`percache_plugin.segments.scoped`, which sets
    ``Prompt.scope``): the hook returns the unscoped keys.

    :param ctx: the engine context.
    :param segments: the validated segments, ``[system?, chunk..., query]``.
    :return: the :class:`~percache_plugin.segments.Prompt`, or None to defer to the next plugin.
    """


@hookspec(firstresult=True)
def percache_plain_prompt(ctx: EngineContext, token_ids: list[int]) -> Prompt | None:
    """Cut a plain prompt's token ids (``pc.complete``) into prompt pieces. firstresult.

    The default cuts ``ctx.config.prefix_block_tokens``-token blocks chained by hash
    (:func:`~percache_plugin.kv.blocks.block_prompt`). A plugin that knows an earlier prompt
    sharing an exact token prefix stored in other pieces (the chunk path, another block size)
    returns :func:`~percache_plugin.segments.chain_pieces` cut at that prompt's piece ends, so
    the keys match what is stored (e.g. :class:`~percache_plugin.plugins.embedding_search.EmbeddingSearch`).

    :param ctx: the engine context.
    :param token_ids: the prompt's ids (not empty).
    :return: a :class:`~percache_plugin.segments.Prompt` over exactly ``token_ids``, or None to
        defer to the next plugin.
    """


@hookspec(firstresult=True)
def percache_plan_reuse(ctx: EngineContext, prompt: Prompt) -> ReusePlan | None:
    """Decide which stored nodes serve the prompt. firstresult.

    The default walks the chunk prefix tree and serves the longest cached exact prefix; with
    ``ctx.config.reuse="shifted"``, also each later piece whose ids a node stored by a prompt of
    the same scope holds (``prompt.scope``, :func:`~percache_plugin.kv.planner.plan_shifted`).

    :param ctx: the engine context (``ctx.store`` answers ``contains``/``info`` without loading
        tensors; ``ctx.config.reuse``).
    :param prompt: the tokenized prompt; ``prompt.pieces[i].key`` is the tree key of reusable pieces.
    :return: a :class:`~percache_plugin.kv.planner.ReusePlan`, or None to defer to the next plugin.
    """


@hookspec(firstresult=True)
def percache_load_chunk(ctx: EngineContext, key: str, token_ids: tuple[int, ...],
                        layered: bool) -> ChunkKV | None:
    """Load the K/V of one planned node. firstresult.

    The default reads ``ctx.store``; a corrupt or missing entry returns None, which ends exact
    reuse at that node (the rest of the prompt is computed) or drops a shifted chunk from the plan.

    :param ctx: the engine context.
    :param key: the store key of the node.
    :param token_ids: the token ids the node must hold (checked against its stored hash).
    :param layered: the caller accepts a chunk whose layers are still being read
        (``ChunkKV.pending``, :mod:`percache_plugin.kv.layer_read`): the exact-prefix path of a
        request with ``Config.kv_overlap_reads``, whose forward waits for each layer at its
        first use. A loader that cannot defer ignores it (and may leave it out of its signature).
        A wrapper (``wrapper=True``) that leaves it out of its signature gets False: the chunk
        it sees is whole, since it might read the tensors.
    :return: the K/V, per layer ``[kv_heads, n_tokens, head_dim]``, or None. The default sets
        ``ChunkKV.row`` to the store row it read the tensors with; a memory fact (whose key holds
        no position) is placed by it. A loader that leaves it None: the fact is used only when its
        row is the same before and after the load.
    """


@hookspec(firstresult=True)
def percache_load_head(ctx: EngineContext, name: str, version: tuple[object, ...],
                       load: Callable[[], ChunkKV | None]) -> ChunkKV | None:
    """Load a persona head snapshot (the K/V of a session's persistent head,
    :mod:`percache_plugin.personas.heads`). firstresult.

    ``load()`` reads the snapshot file, checked against the row ``version`` comes from (None:
    missing or corrupt). The RAM tier serves the copy it holds while the row is still
    ``version``, else calls ``load`` and keeps the result; the default calls ``load``. Snapshots
    kept in memory (no store directory) are not loaded through this hook.

    :param ctx: the engine context.
    :param name: the snapshot's name: its fingerprint and head key.
    :param version: the snapshot's row now (tokens, file, checksum).
    :param load: reads the snapshot.
    :return: the head's K/V (``ChunkKV.origin`` says where it came from), or None.
    """


@hookspec(firstresult=True)
def percache_join_buffers(ctx: EngineContext) -> JoinBuffers | None:
    """Memory to join a request's exact-prefix chunks into, lent from one request to the next.
    firstresult.

    Called once per request that builds its cache from loaded chunks. The first forward
    concatenates each layer's chunks with its new tokens (:class:`~percache_plugin.kv.cache.
    DeferredLayer`); with buffers it writes into memory they lend (reused only while nothing
    else references it, :mod:`percache_plugin.kv.join_buffer`), pages already mapped, instead
    of a fresh allocation whose first writes fault. The RAM tier lends its own with
    ``Config.ram_join_buffers`` on; the default lends none. The result is the same either way.

    :param ctx: the engine context.
    :return: a :class:`~percache_plugin.kv.join_buffer.JoinBuffers`, or None to defer (no
        buffers: a fresh allocation per join).
    """


@hookspec(firstresult=True)
def percache_prefetch_chunks(ctx: EngineContext, keys: tuple[str, ...]) -> bool | None:
    """Start reading the planned nodes ahead of their ``percache_load_chunk`` calls. firstresult.

    Called once per request with ``Config.kv_prefetch`` on (off by default: with the
    layer-by-layer reader it delays layer 0), after planning, with every node the plan will load. The default
    asks the OS to read the nodes' files into its page cache now (``KVStore.prefetch``:
    asynchronous, all files at once, so the disk works at full queue depth while the first
    nodes are checked and copied); the RAM tier prefetches only the nodes it does not hold.
    Nothing is served from a prefetch: the loads still check everything.

    :param ctx: the engine context.
    :param keys: the store keys of the planned nodes, in load order.
    :return: True once handled, or None to defer to the next plugin.
    """


@hookspec(firstresult=True)
def percache_select_recompute(
    ctx: EngineContext, prompt: Prompt, plan: ReusePlan, context: RecomputeContext
) -> Sequence[int] | None:
    """Choose which positions of shifted chunks to compute again. firstresult.

    The default applies ``ctx.config.recompute`` (``none``, ``all``, ``head:k``, ``tail:k``,
    ``deviation:r``; see :mod:`percache_plugin.kv.recompute`). Only positions in
    ``context.candidates`` may be returned; anything else makes the request fall back to a full
    prefill (reported in ``stats.fallback``).

    :param ctx: the engine context.
    :param prompt: the tokenized prompt.
    :param plan: the reuse plan (its ``shifted`` pieces are the candidates).
    :param context: spans of the shifted chunks and a lazy K/V-deviation probe.
    :return: prompt positions to recompute, or None to defer to the next plugin.
    """


@hookspec(firstresult=True)
def percache_store_chunk(
    ctx: EngineContext, key: str, piece: PromptPiece, parent: str | None, kv: ChunkKV, exact: bool,
    extra: Mapping[str, str],
) -> bool | None:
    """Persist the freshly computed K/V of one reusable piece. firstresult.

    The first implementation that returns a value handles the piece and the ones after it
    (the built-in store, registered ``trylast``) are not called: a replacement store returns
    True and the built-in store receives no write.

    :param ctx: the engine context.
    :param key: the store key: ``piece.key`` (a prefix-tree node) when ``exact``; otherwise a key
        outside the tree, so the entry serves only shifted reuse.
    :param piece: the piece (``piece.token_ids``, ``piece.start``).
    :param parent: the tree key of the node before it, or None for the first (None when not exact).
    :param kv: its K/V, sliced from the request's cache (a copy, safe to keep).
    :param exact: False when the K/V was computed in a context that itself holds approximate
        (shifted) K/V; such entries must never serve exact reuse.
    :param extra: metadata the writer needs back with the entry (``NodeInfo.extra``); empty for
        an unscoped prompt's pieces, ``{"scope": <scope>}`` for a scoped prompt's
        (``Prompt.scope``): shifted reuse finds a piece by its ids only among its own scope's.
        A session's memory-region fact (``piece.segment.id`` is the fact id, ``piece.start`` its
        position) passes ``{"memory": "1", "context": <hash of the ids
        before it>}``: its K/V is spliced unshifted only where both match again.
    :return: True when handled (stored or deliberately skipped), None to defer to the next plugin.
    """


@hookspec
def percache_draft_sources(ctx: EngineContext, prompt: Prompt, hints: DraftHints) -> Sequence[DraftSource] | None:
    """Offer token sequences that greedy decoding may draft from. Every implementation is called.

    Called once per ``generate()`` that decodes greedily with ``ctx.config.drafting`` on. Drafts
    are verified by the model (the output is exactly that of plain greedy decoding), so a source
    may offer anything, near misses included; a poor source costs time, not correctness. The
    built-in plugin offers the prompt (system prompt, chunks, question) and every entry of
    ``hints`` (the nearest QA-bank answers, earlier assistant turns, the caller's predicted
    output under ``"prediction"``: ``generate(prediction=...)``). ``ctx.config.draft_sources``
    filters the sources by name afterwards.

    :param ctx: the engine context (``ctx.tokenizer`` to tokenize texts).
    :param prompt: the tokenized prompt.
    :param hints: texts and token ids the caller offered, by source name.
    :return: draft sources (:class:`~percache_plugin.decode.sources.DraftSource`), or None.
    """


@hookspec
def percache_request_start(ctx: EngineContext, prompt: Prompt) -> None:
    """A request begins, before planning. Every implementation is called.

    Fires for ``generate()`` and ``prefill()`` while the handle is enabled; every request that
    fired it fires :func:`percache_request_end` too, also when it fails.

    :param ctx: the engine context.
    :param prompt: the tokenized prompt.
    """


@hookspec
def percache_request_end(
    ctx: EngineContext, prompt: Prompt, stats: GenerationStats, generation: Generation | None
) -> None:
    """A request finished; ``stats`` is final. Every implementation is called.
    An observer (:data:`OBSERVER_HOOKS`): an exception is logged and counted, never raised.

    :param ctx: the engine context.
    :param prompt: the tokenized prompt.
    :param stats: the request's stats (also for ``prefill()``, which decodes nothing).
    :param generation: the result returned to the caller; None for ``prefill()`` and for a
        request that raised.
    """


@hookspec(firstresult=True)
def percache_retrieve(ctx: AssistantContext, query: Query, k: int, scope: str | None) -> list[Chunk] | None:
    """Find the chunks to answer ``query`` from. firstresult.

    The default searches the knowledge bank (BM25 + embeddings, reciprocal-rank fusion). The
    chunks returned are put into the prompt as they are: they need not come from the knowledge
    bank.

    :param ctx: the assistant context.
    :param query: the user's question (``query.text``; ``query.embedding`` is computed once).
    :param k: how many chunks (``ctx.config.top_k``).
    :param scope: only chunks of this scope; None searches every scope.
    :return: chunks, best first, or None to defer to the next plugin.
    """


@hookspec(firstresult=True)
def percache_retrieve_batch(ctx: AssistantContext, queries: Sequence[Query], k: int,
                            scope: str | None) -> list[list[Chunk]] | None:
    """``percache_retrieve`` for many queries of one scope at once. firstresult.

    After documents are added or removed, every stored answer of their scopes is checked against
    its question's retrieval now (``percache_documents_added``); the default retrieves them all
    in one pass over the knowledge bank (one BM25 scoring, one HNSW query), with the same result
    as one ``percache_retrieve`` per query. It is called only when every plugin implementing
    ``percache_retrieve`` (wrappers included) implements this hook too: otherwise each query goes
    through ``percache_retrieve``, so a plugin replacing or wrapping retrieval is never bypassed.

    :param ctx: the assistant context.
    :param queries: the questions (``query.embedding``: their stored embeddings, when readable).
    :param k: how many chunks per query (``ctx.config.top_k``).
    :param scope: the scope of every query.
    :return: one list of chunks per query, in order, each as ``percache_retrieve`` returns it;
        or None to defer (no plugin: one ``percache_retrieve`` per query).
    """


@hookspec(firstresult=True)
def percache_resolve_chunks(ctx: AssistantContext, ids: Sequence[str]) -> list[Chunk] | None:
    """Turn chunk ids (the sources of a stored answer) back into chunks. firstresult.

    Idle work rebuilds prompts of stored answers from their sources. The default looks the ids
    up in the knowledge bank and returns None when it does not know one of them, so a plugin
    whose retrieval returns its own chunks implements this hook too.

    :param ctx: the assistant context.
    :param ids: chunk ids.
    :return: the chunks in the order of ``ids``, or None to defer (no plugin: the task is skipped).
    """


@hookspec(firstresult=True)
def percache_chunk_vectors(ctx: AssistantContext, chunks: Sequence[Chunk]) -> dict[str, np.ndarray] | None:
    """The stored embeddings of retrieved chunks, for ask()'s relevance check
    (``Config.relevance_threshold``, ``Answer.relevance``). firstresult.

    The default returns the knowledge bank's vectors of the chunks it indexed with the same
    text. Chunks no plugin returns a vector for (a third-party retriever's own chunks) are
    embedded now with the banks' embedder, the one the question is embedded with, and
    counted in ``Answer.relevance_embedded``.

    :param ctx: the assistant context.
    :param chunks: the chunks ``percache_retrieve`` returned.
    :return: unit vectors by chunk id (chunks the plugin does not know left out), or None to
        defer (no plugin: every chunk is embedded now).
    """


@hookspec(firstresult=True)
def percache_add_documents(ctx: AssistantContext, docs: Sequence[object], scope: str | None) -> AddReport | None:
    """Chunk, embed and index documents (``PerCache.add_documents``). firstresult.

    The default adds them to the knowledge bank. The report's ``new_chunks`` go on to
    ``percache_documents_added`` and to knowledge predictions.

    :param ctx: the assistant context.
    :param docs: the documents, a list (each a str, bytes, a mapping or a ``Document``).
    :param scope: the scope of documents that carry none.
    :return: what was added, or None to defer (no plugin: LookupError).
    """


@hookspec(firstresult=True)
def percache_list_chunks(ctx: AssistantContext, scope: str | None) -> list[str] | None:
    """The ids of the indexed chunks, in the order added (``PerCache.predict("knowledge")``
    queues questions about each). firstresult.

    :param ctx: the assistant context.
    :param scope: chunks of this scope only; None: unscoped chunks only (as retrieval reads
        them), never another scope's.
    :return: chunk ids, or None to defer (no plugin: none).
    """


@hookspec(firstresult=True)
def percache_qa_lookup(
    ctx: AssistantContext, query: Query, scope: str | None, retrieved: Sequence[str],
    max_new_tokens: int | None,
) -> LookupResult | None:
    """Look for a stored answer to serve instead of generating. firstresult.

    The default asks the QA bank with ``ctx.config.similarity_threshold`` and, unless
    ``consistency_min_overlap`` is None, the retrieval-consistency guard.

    :param ctx: the assistant context.
    :param query: the user's question.
    :param scope: the question's scope; only entries of the same scope may answer it.
    :param retrieved: ids of the chunks retrieved for ``query``.
    :param max_new_tokens: the request's length cap: serve only an answer greedy decoding
        with it gives, or its first ``max_new_tokens`` tokens (the default's ``length`` guard;
        ask() then serves those tokens).
    :return: the lookup result (its ``match`` is served when not None), or None to defer.
    """


@hookspec(firstresult=True)
def percache_qa_entries(ctx: AssistantContext, scope: str | None | AllScopes,
                        question: str | None) -> list[QAEntry] | None:
    """List stored QA entries for idle maintenance. firstresult.

    The scheduler reads them to queue conversions after ``configure()`` (decode answerless
    entries, re-prefill evicted chunks) and to re-prefill one question. The default lists the
    built-in QA bank's entries; with the QA-bank plugin unregistered nothing is listed.

    :param ctx: the assistant context.
    :param scope: entries of this scope only (``None``: unscoped), or
        :data:`~percache_plugin.rag.qa_types.ALL_SCOPES` for every scope.
    :param question: only entries of exactly this question (None: every question).
    :return: the entries in id order, or None to defer (no plugin: no entries).
    """


@hookspec(firstresult=True)
def percache_qa_known(ctx: AssistantContext, query: Query, scope: str | None) -> bool | None:
    """Whether the QA bank already holds ``query`` (a predicted question is then dropped as a
    duplicate). firstresult.

    The default asks the built-in QA bank for its most similar entry of ``scope``: known when
    at least ``ctx.config.similarity_threshold`` similar and the key-terms guard agrees (a
    person or date swap is a new question).

    :param ctx: the assistant context.
    :param query: the predicted question.
    :param scope: the question's scope.
    :return: True (known), False (new), or None to defer (no plugin: new).
    """


@hookspec(firstresult=True)
def percache_qa_similar(ctx: AssistantContext, query: Query, scope: str | None, tau: float,
                        k: int) -> list[QAEntry] | None:
    """Stored entries whose question is at least ``tau`` similar to ``query`` (paraphrases),
    no guard applied and no hit counted. firstresult.

    ask() drafts from the answers of the nearest questions (``Config.drafting``); idle work
    checks a served answer against its paraphrases and disputes them. The default asks the
    built-in QA bank.

    :param ctx: the assistant context.
    :param query: the question.
    :param scope: entries of this scope only (``None``: unscoped).
    :param tau: the least cosine similarity.
    :param k: at most this many entries.
    :return: the entries, most similar first, or None to defer (no plugin: none).
    """


@hookspec(firstresult=True)
def percache_qa_mark_stale(ctx: AssistantContext, entry_ids: Sequence[int]) -> list[int] | None:
    """Take stored entries out of service until they are regenerated or corrected (a user's
    correction or a regenerated answer contradicts them). firstresult.

    :param ctx: the assistant context.
    :param entry_ids: ids from the entries this plugin listed.
    :return: the ids marked, or None to defer (no plugin: none).
    """


@hookspec(firstresult=True)
def percache_qa_correct(ctx: AssistantContext, entry_id: int, answer: str) -> QAEntry | None:
    """The user's correction of a stored answer (``PerCache.correct``): the entry serves
    ``answer`` from now on. firstresult.

    :param ctx: the assistant context.
    :param entry_id: the entry to correct; an unknown id raises KeyError.
    :param answer: the corrected answer.
    :return: the corrected entry, or None to defer (no plugin: LookupError).
    """


@hookspec(firstresult=True)
def percache_qa_stats(ctx: AssistantContext) -> dict[str, object] | None:
    """The QA bank's counters of this session, for ``PerCache.stats()``. firstresult.

    The default returns the built-in QA bank's ``stats()`` once the bank is open (zero
    counters before).

    :param ctx: the assistant context.
    :return: at least ``lookups`` and ``hits`` (ints), or None to defer (no plugin: zeros).
    """


@hookspec
def percache_configured(ctx: AssistantContext, changed: frozenset[str]) -> None:
    """``configure()`` applied new settings (``ctx.config`` holds them).
    Every implementation is called.

    The defaults apply ``qa_byte_limit`` to the QA bank (evicting at once) and ``chunk_words``
    to documents added from now on.

    :param ctx: the assistant context.
    :param changed: names of the ``Config`` fields that changed.
    """


@hookspec
def percache_qa_store(
    ctx: AssistantContext, query: Query, answer: str | None, scope: str | None,
    sources: Sequence[str], origin: str, tokens: AnswerTokens | None,
) -> None:
    """A question was answered (or prefilled); remember it. Every implementation is called.
    An observer (:data:`OBSERVER_HOOKS`): an exception is logged and counted, never raised.

    :param ctx: the assistant context.
    :param query: the question.
    :param answer: the generated answer, or None for a prefill-only predicted question.
    :param scope: the question's scope.
    :param sources: ids of the chunks the answer was generated from.
    :param origin: ``"user"`` (asked by the user) or ``"predicted"`` (idle-time population).
    :param tokens: the ids the answer was generated as and whether it ended on an
        end-of-sequence token or on its ``max_new_tokens``; None for a prefill-only question
        or an answer not generated (served whole to any cap, as a correction is).
    """


@hookspec
def percache_documents_added(ctx: AssistantContext, report: AddReport) -> None:
    """New documents were indexed, documents were given again or removed (the built-in bank
    calls it after a removal too: ``report.documents`` 0, the chunks deleted in
    ``report.replaced_chunks``), or memory facts added or updated (the memory plugin passes
    them as chunks: ``ask()`` retrieves facts beside chunks). Every implementation is called.

    The default marks stale every QA entry of the changed scopes whose question now retrieves
    other chunks than it was answered from (a new chunk, or an old one the change moved into
    its top-k: BM25 weighs a word by how many chunks hold it), and every entry of those scopes
    answered under other retrieval settings (its retrieval cannot be reproduced here), and
    queues their refresh for idle time.

    :param ctx: the assistant context.
    :param report: what changed (``report.new_chunks``, ``report.scopes``).
    """


@hookspec
def percache_sources_forgotten(ctx: AssistantContext, ids: Sequence[str]) -> int | None:
    """Sources (memory facts, chunks) were forgotten: drop everything built on them.
    Every implementation is called.

    The default (the QA-bank plugin) deletes every stored answer whose ``sources`` include one
    of ``ids``, so an answer built on a forgotten fact is never served again, and the entries of
    questions predicted from one of ``ids`` (``PredictionState.predicted_from``).

    :param ctx: the assistant context.
    :param ids: the forgotten ids.
    :return: how many derived items the plugin removed (None: nothing to do).
    """


@hookspec
def percache_close(ctx: AssistantContext) -> None:
    """The handle is closing: release what the plugin holds. Every implementation is called.

    :param ctx: the assistant context.
    """


@hookspec
def percache_register_recompute_strategies(register: Callable[[str, RecomputeStrategy], None]) -> None:
    """Add recompute strategies, by name, for ``Config.recompute`` (``"name"`` or
    ``"name:amount"``). Every implementation is called, the built-ins first; registering a
    name again replaces the earlier entry. Collected once, when the handle is built.

    :param register: ``register(name, RecomputeStrategy(choose, takes_amount, max_amount))``.
    """


@hookspec
def percache_register_eviction_policies(register: Callable[[str, EvictionPolicy], None]) -> None:
    """Add K/V store eviction policies, by name, for ``Config.kv_eviction``.
    Every implementation is called, the built-in ``"lfu-leaves"`` first; registering a name again
    replaces the earlier entry. Collected once, when the handle is built.

    :param register: ``register(name, policy)``; ``policy(nodes, limit, protect)`` gets the
        fingerprint's :class:`~percache_plugin.kv.eviction.StoredNode` rows and returns the keys
        to evict (their descendants go with them) so that the rest fits ``limit`` bytes.
    """


@hookspec
def percache_register_buffer_policies(register: Callable[[str, PolicyFactory], None]) -> None:
    """Add replacement policies of the RAM tier, by name, for ``Config.ram_cache_policy``.
    Every implementation is called, the built-ins first (``llm``, ``lru``, ``lfu``, ``lecar``);
    registering a name again replaces the earlier entry. Collected once, when the handle is built.

    :param register: ``register(name, factory)``; ``factory(capacity_bytes)`` returns a fresh
        :class:`~percache_plugin.buffer.policies.Policy` (``hit``, ``admit``, ``inserted``,
        ``removed``) for one cache.
    """


@hookspec
def percache_register_model_profiles(register: Callable[[str, ModelProfile], None]) -> None:
    """Describe model families by ``model_type`` (how positions enter attention, the RoPE
    layout). Every implementation is called, the built-in table first; a later entry for the
    same ``model_type`` replaces it. Collected once, when the handle is built;
    :func:`percache_model_profile` (one model) still wins over the registry.

    :param register: ``register(model_type, ModelProfile(...))``.
    """


@hookspec
def percache_register_idle_tasks(register: Callable[[str, Any], None]) -> None:
    """Add kinds of idle-time work. Every implementation is called, the built-ins first
    (``answer``, ``refresh``, ``abstract``, ``predict_knowledge``, ``predict_history``,
    ``populate``, ``decode``, ``reprefill``); a later entry of a kind replaces it. Tasks of a
    registered kind can be queued with ``pc.idle_queue.push(kind, question, scope)``.

    :param register: ``register(kind, runner)``; ``runner(ctx, task, report)`` runs one
        :class:`~percache_plugin.idle.IdleTask` with an
        :class:`~percache_plugin.assistant.idle_context.IdleContext` (``ctx.generate``,
        ``ctx.prefill``, ``ctx.answer``, ``ctx.ctx.hooks``) and adds what it computed to the
        :class:`~percache_plugin.idle.IdleReport`; raising
        :class:`~percache_plugin.core.preemption.Preempted` leaves the task queued.
    """


@hookspec
def percache_mask_function(ctx: EngineContext) -> MaskFunction | None:
    """An extra mask ANDed into every attention mask the model builds. Every implementation is called.

    Consulted each time a mask is built (once per forward and mask kind: causal, sliding; and
    for the splice mask of shifted reuse). The results that are not None are composed with
    ``transformers.masking_utils.and_masks`` and ANDed into the model's own mask, so a position
    is attended only where the model's mask and every extra mask allow it. With an extra mask
    the causal shortcut (no mask) is off. Every query row must keep at least one key, or sdpa
    returns NaN. Masking saves no compute (a masked slot is still multiplied). A model whose
    attention does not go through transformers' ``AttentionInterface`` (Falcon, GPT-J, Bloom,
    ...) builds no mask percache can extend: every request then raises while a plugin returns a
    mask, instead of ignoring it.

    :param ctx: the engine context.
    :return: ``fn(batch_idx, head_idx, q_idx, kv_idx) -> bool`` over cache slots (== positions),
        index-based (broadcastable tensor operations, like transformers' own mask functions), or
        None for no extra mask.
    """


@hookspec
def percache_edit_cache(ctx: EngineContext, session: Session, editor: CacheEditor) -> None:
    """Edit a chat session's live K/V cache before a turn is computed. Every implementation is called.

    ``editor.delete(positions)`` removes slots (their token ids leave the conversation too; the
    persistent head cannot be deleted) and ``editor.shift((start, end), delta)`` rotates keys to
    new RoPE positions (``editor.evict(start, end)`` does both, closing the gap). Any edit marks
    the turn approximate in its stats (``cache_edits``).

    :param ctx: the engine context.
    :param session: the session (``session.turns``, ``session.head_ids``; read only).
    :param editor: the editor over ``session.cache``.
    """


@hookspec(firstresult=True)
def percache_select_eviction(ctx: EngineContext, session: Session, need: int) -> Sequence[int] | None:
    """Choose which turns leave a session's cache when its budget is exceeded. firstresult.

    The default takes the oldest unpinned turns until ``need`` tokens are freed. Whole turns
    (user + reply) leave; pinned turns are never evicted (ids naming them are ignored).

    :param ctx: the engine context (``ctx.config.session_kv_tokens``, ``session_eviction``).
    :param session: the session (``session.turns``).
    :param need: tokens of unpinned turns that must be freed.
    :return: ``turn_id`` of each turn to evict, or None to defer to the next plugin.
    """


@hookspec(firstresult=True)
def percache_turn_relevance(ctx: EngineContext, session: Session, turn: Turn, message: str) -> float | None:
    """Score how relevant an earlier turn is to the new message (``masked`` eviction). firstresult.

    In ``masked`` mode the turns to exclude are the least relevant ones, ties broken by age;
    the default scores every turn 0 (so the oldest go first). The newest turn is always kept.

    :param ctx: the engine context.
    :param session: the session.
    :param turn: an earlier turn still in the cache.
    :param message: the new user message.
    :return: a score (higher: keep longer), or None to defer.
    """


@hookspec
def percache_session_saved(ctx: EngineContext, session: Session, turn_id: int) -> None:
    """A chat turn was appended to the store. Every implementation is called.
    An observer (:data:`OBSERVER_HOOKS`): an exception is logged and counted, never raised.

    :param ctx: the engine context.
    :param session: the session (``session.saved_upto`` cache positions are on disk).
    :param turn_id: the turn just saved.
    """


@hookspec
def percache_session_loaded(ctx: EngineContext, session: Session, source: str) -> None:
    """A session was loaded from the store. Every implementation is called.

    :param ctx: the engine context.
    :param session: the session.
    :param source: ``"snapshot"`` (its K/V was restored) or ``"ids"`` (the snapshot was missing
        or corrupt: the next turn recomputes the conversation from its stored ids).
    """


@hookspec
def percache_turn_logged(ctx: EngineContext, record: TurnRecord) -> None:
    """A chat turn was written to the turn log (memory level L3). Every implementation is called.
    An observer (:data:`OBSERVER_HOOKS`): an exception is logged and counted, never raised.

    The record carries ``fact_ids``, taken from the turn's ``ChatStats.fact_ids``: a memory
    plugin that recalls facts into a turn's context sets that list during the turn, and the log
    stores it with the turn (``percache memory export`` writes it in each line's ``meta``).

    :param ctx: the engine context.
    :param record: the logged turn (:class:`~percache_plugin.turnlog.TurnRecord`); feedback
        comes later through ``pc.feedback``.
    """


@hookspec(firstresult=True)
def percache_model_profile(model: torch.nn.Module) -> Any:
    """Describe a model family the built-in profile table does not know. firstresult.

    :param model: the loaded model.
    :return: a :class:`~percache_plugin.attention.profile.ModelProfile`, or None to use the table.
    """


HOOK_NAMES: tuple[str, ...] = tuple(
    name for name in dict(globals()) if name.startswith("percache_")
)

OBSERVER_HOOKS: frozenset[str] = frozenset({
    "percache_request_end", "percache_qa_store", "percache_session_saved", "percache_turn_logged",
})
"""Hooks called after the answer is computed and stored, whose result changes nothing the caller
gets: an implementation that raises is logged and counted in ``plugin_errors``, not raised."""
