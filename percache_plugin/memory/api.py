"""``pc.memory``: add, search, list, update, history and forget facts of the handle's store.

:meth:`Memory.forget` removes a fact from every place percache keeps it: its rows and history
(a tombstone keeps the id), the in-memory index, its K/V nodes in the store under every model
fingerprint (the ones recorded for it and any node holding exactly its tokens as a chunk, with
their descendants), and every
stored answer built on it (``percache_sources_forgotten``); then it checkpoints the SQLite WAL
so no old frame holds the text (deleted rows are zeroed by ``secure_delete``).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from ..forget_journal import ForgetKind
from ..hooks.contexts import AssistantContext
from ..plugins.removal import journaled
from .bank import AddResult, FactHit, MemoryBank, check_fact_id
from .forget import ForgetReport, drop_kv, forget_everywhere, journal_ids
from .idle import ExtractionStats, queue_turns
from .limits import check_fact_length, fact_token_limit
from .plugin import MemoryPlugin
from .rows import Fact, HistoryEvent
from .session_facts import drawn_only_from, drop_queued_turns, drop_readded_from

__all__ = ["ForgetReport", "Memory"]


class Memory:
    """The facts (L2 memory) of one handle; every call takes a ``scope`` (``None``: the
    unscoped memory) and never reads another scope."""

    def __init__(self, ctx: AssistantContext, plugin: Callable[[], MemoryPlugin | None],
                 tokenizer: Any, context: int | None = None) -> None:
        self._ctx = ctx
        self._plugin = plugin
        self._tokenizer = tokenizer
        self._context = context  # the model's context in tokens (None: not stated)
        # called with a forgotten fact's id (the handle's: take it out of the sessions' regions)
        self.forgotten: list[Callable[[str], object]] = []
        # called with an updated fact's id (the handle's: take its old text out of chat turns)
        self.updated: list[Callable[[str], object]] = []
        if ctx.forget_journal is not None:  # a forget a failure or a crash cut short is completed
            ctx.forget_journal.register("fact", ForgetKind(self._resolves, self._forget_leftovers))

    @property
    def extraction(self) -> ExtractionStats:
        """Counters of idle-time extraction (facts stored, duplicates, malformed lines, ...)."""
        plugin = self._plugin()
        return plugin.extraction if plugin is not None else ExtractionStats()

    @property
    def corrupt(self) -> builtins.list[str]:
        """Ids of the fact rows skipped so far as unreadable (metadata or K/V keys not JSON, a
        vector of the wrong size): skipped wherever they are read (never recalled or searched),
        like facts not stored; :meth:`forget` removes them."""
        plugin = self._plugin()
        return plugin.bank(self._ctx).corrupt if plugin is not None else []

    @property
    def bank(self) -> MemoryBank:
        plugin = self._plugin()
        if plugin is None:
            raise LookupError("the built-in memory plugin is not registered")
        return plugin.bank(self._ctx)

    def recall(self, message: str, scope: str | None) -> builtins.list[tuple[str, str]]:
        """``(fact id, text)`` of the facts of ``scope`` to recall for a chat message (empty
        memory: nothing is embedded)."""
        plugin = self._plugin()
        if plugin is None or len(plugin.bank(self._ctx)) == 0:
            return []
        return [(h.fact.id, h.fact.text) for h in plugin.recall(self._ctx, self._ctx.query(message), scope)]

    def current(self, fact_id: str) -> tuple[str, str] | None:
        """``(id, text)`` of the fact serving in ``fact_id``'s place: the fact itself (its
        current text), the fact that superseded it, or None when it is forgotten."""
        plugin = self._plugin()
        if plugin is None:
            return None
        bank = plugin.bank(self._ctx)
        seen: set[str] = set()
        fact = bank.find(fact_id)
        while fact is not None and fact.status != "active" and fact.superseded_by and fact.id not in seen:
            seen.add(fact.id)
            fact = bank.find(fact.superseded_by)
        return None if fact is None or fact.status != "active" else (fact.id, fact.text)

    def after_turn(self, session: str, message: str, reply: Any, scope: str | None) -> None:
        """Queue the chat turn for extraction into ``scope`` (``Config.memory_extraction``)."""
        config = self._ctx.config
        if config.memory_extraction != "off":
            turn = f"User: {message}\nAssistant: {reply.text.strip()}"
            queue_turns(self._ctx.idle_queue, session, [(reply.turn_id, turn)], scope,
                        delay_s=config.prediction_quiet_s)

    def add(self, text: str, scope: str | None = None,
            metadata: Mapping[str, str] | None = None) -> AddResult:
        """Store a fact. ``metadata["subject"]`` names what it is about: a newer fact with the
        same subject supersedes the older (kept in history, not served). The same fact added
        twice is stored once and never removed (``result.status``).

        :raises ValueError: the fact is longer than :attr:`fact_token_limit` tokens (a chat
            turn recalling it would not fit the model's context)."""
        check_fact_length(self._tokenizer, text, self.fact_token_limit)
        return self.bank.add(text, scope, metadata)

    @property
    def fact_token_limit(self) -> int:
        """The most tokens a fact may have (``Config.memory_fact_tokens``; by default the
        model's context divided by ``2 * memory_k``, 1024 when the model states none)."""
        return fact_token_limit(self._ctx.config, self._context)

    def search(self, query: str, scope: str | None = None, k: int = 5) -> builtins.list[FactHit]:
        """The ``k`` best active facts of ``scope`` (BM25 + embeddings), best first."""
        return self.bank.search(query, scope, k)

    def get(self, fact_id: str) -> Fact:
        return self.bank.get(fact_id)

    def list(self, scope: str | None = None, *, superseded: bool = False) -> builtins.list[Fact]:
        """Facts of ``scope`` in the order added (active only unless ``superseded``)."""
        return self.bank.list(scope, superseded=superseded)

    def scopes(self) -> builtins.list[str | None]:
        return self.bank.scopes()

    def update(self, fact_id: str, text: str, metadata: Mapping[str, str] | None = None) -> Fact:
        """Replace a fact's text; the old version stays in :meth:`history`. K/V and stored
        answers built on the old text are dropped (its K/V under every model fingerprint, as
        :meth:`forget` does), and so is the old text in the chat turns it
        was recalled into (as for :meth:`forget`; a session's region puts the new text in its
        place at the next turn): a later turn recalls the new text, never beside the old one.

        :raises ValueError: the new text is longer than :attr:`fact_token_limit` tokens."""
        check_fact_length(self._tokenizer, text, self.fact_token_limit)
        old = self.bank.get(fact_id)
        fact = self.bank.update(fact_id, text, metadata)
        stores = self._ctx.engine.every_store()  # every fingerprint's K/V, as forget does
        drop_kv(stores, old.id, set(old.kv_keys), old.text, self._token_ids)
        self._drop_answers([old.id])
        for fn in self.updated:
            fn(fact_id)
        # the K/V of the old text a chat turn in flight stored after the drop (as for forget)
        drop_kv(stores, fact_id, set(), old.text, self._token_ids)
        return fact

    def history(self, fact_id: str) -> builtins.list[HistoryEvent]:
        return self.bank.history(fact_id)

    def forget(self, fact_id: str) -> ForgetReport:
        """Remove the fact everywhere (see the module docstring); only its id remains, as a
        tombstone (``get`` then raises ``UnknownFact`` saying it was forgotten). Forgetting a
        tombstoned id again cleans whatever an interrupted forget left."""
        stores = self._ctx.engine.every_store()  # every fingerprint's K/V, as removing a source
        with journaled(self._ctx, "fact", journal_ids(self.bank, check_fact_id(fact_id))):
            report = forget_everywhere(self.bank, fact_id, stores, self._drop_answers,
                                       self._token_ids)
            for fn in self.forgotten:
                fn(fact_id)
            # A chat turn that recalled the fact before its rows went stored the fact's K/V after
            # the drop above; the sessions' listeners waited for it to end (the session's lock).
            late = drop_kv(stores, fact_id, set(), None, None)
        return replace(report, kv_nodes=report.kv_nodes + late)

    def _resolves(self, fact_id: str) -> bool:
        """Whether ``fact_id`` is an active fact (the forget journal deletes nothing built on one)."""
        plugin = self._plugin()
        fact = None if plugin is None else plugin.bank(self._ctx).find(fact_id)
        return fact is not None and fact.status == "active"

    def _forget_leftovers(self, fact_ids: Iterable[str]) -> None:
        """The K/V and answers an interrupted forget left of forgotten (tombstoned) facts (the
        journal's re-run; the sessions' listeners are not called: they wait for the sessions'
        locks, and the re-run holds the engine's)."""
        plugin = self._plugin()
        if plugin is None:
            return
        bank = plugin.bank(self._ctx)
        stores = self._ctx.engine.every_store()
        for fact_id in fact_ids:
            if bank.tombstoned(fact_id):
                forget_everywhere(bank, fact_id, stores, self._drop_answers, self._token_ids)

    def forget_again(self, fact_ids: Iterable[str]) -> builtins.list[str]:
        """Forget once more those of ``fact_ids`` that are forgotten (tombstoned): a chat turn
        that recalled one before another handle or process forgot it saved it after (see
        ``RegionMemory.recheck``). Returns their ids."""
        plugin = self._plugin()
        if plugin is None:
            return []
        bank = plugin.bank(self._ctx)
        gone = [fact_id for fact_id in dict.fromkeys(fact_ids) if bank.tombstoned(fact_id)]
        for fact_id in gone:
            self.forget(fact_id)
        return gone

    def forget_session(self, session: str) -> builtins.list[str]:
        """What memory drew from a deleted session: its turns queued for extraction leave the idle
        queue (then its database is checkpointed), and every fact, active or superseded, whose
        sources are all turns of ``session`` is forgotten (:meth:`forget`), counting the sources
        it was added again from. A fact with a source in another session (stated there too) or
        none (added by hand) stays, less the history events of its re-adds from ``session``
        (their text). Returns the ids forgotten."""
        drop_queued_turns(self._ctx.idle_queue, session)
        plugin = self._plugin()
        if plugin is None:
            return []
        bank = plugin.bank(self._ctx)
        gone = drawn_only_from(bank, session)
        for fact_id in gone:
            self.forget(fact_id)
        drop_readded_from(bank, session)
        return gone

    def _drop_answers(self, ids: builtins.list[str]) -> int:
        return self._ctx.hooks.sources_forgotten(self._ctx, ids)

    def _token_ids(self, text: str) -> builtins.list[builtins.list[int]]:
        separator = self._ctx.config.chunk_separator
        return [list(self._tokenizer(t, add_special_tokens=False)["input_ids"])
                for t in (text + separator, text)]

