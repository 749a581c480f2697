"""The QA bank: answered questions, found again by embedding similarity (PerCache 4.2.1).

A new question whose embedding is close enough (cosine ``>= tau``) to a stored question
of the same scope, answered by the same model, gets the stored answer without any
inference, if the guards in :mod:`percache_plugin.rag.guards` pass. Entries can be listed,
corrected and deleted; the bank holds at most ``byte_limit`` bytes and evicts
least-frequently-served entries (ties: least recently served, then oldest).

Storage: the ``qa_*`` tables of the store's SQLite file (:mod:`.qa_rows`). Every change is
one transaction; memory is updated only after the commit. Vectors also live in memory, one
partition per (scope, model) (:mod:`.qa_vectors`). Several banks (handles, processes) may
share one database file: writes are upserts, and a bank re-reads the rows whenever another
one changed them (the ``generation`` counter) before it answers.

Entries are bound to the model that answered them (``model``, the fingerprint): a bank
whose current model differs does not serve them unless ``share_across_models`` is on.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Collection, Sequence
from types import TracebackType

import numpy as np

from percache_plugin.rag.guards import (
    DEFAULT_MEANING_GUARDS,
    DEFAULT_MIN_OVERLAP,
    MEANING_GUARDS,
    REASONS,
    check_meaning,
    check_min_overlap,
    check_tau,
)
from percache_plugin.rag.qa_embedded import EMBEDDED_GUARDS, can_align, embedded_verdicts
from percache_plugin.rag.qa_lookup import Judged, judge_candidates
from percache_plugin.rag.qa_memory import Slot
from percache_plugin.rag.qa_types import (
    ALL_SCOPES,
    DEFAULT_BYTE_LIMIT,
    AllScopes,
    EntryTooLargeError,
    LookupResult,
    Origin,
    QAEntry,
    QAMatch,
    check_ids,
    check_question,
    check_scope,
)
from percache_plugin.rag.qa_writes import QABankBase

__all__ = [
    "ALL_SCOPES",
    "DEFAULT_BYTE_LIMIT",
    "EntryTooLargeError",
    "LookupResult",
    "Origin",
    "QABank",
    "QAEntry",
    "QAMatch",
]

log = logging.getLogger("percache")


class QABank(QABankBase):
    """Answered questions of one store, searchable by meaning; thread-safe. See
    :class:`~percache_plugin.rag.qa_writes.QABankBase` for the parameters and the writes."""

    # -- reading -------------------------------------------------------------------------

    def similar(self, question: str, *, tau: float, scope: str | None = None,
                embedding: np.ndarray | None = None, k: int = 20) -> list[QAMatch]:
        """Stored questions of ``scope`` (and this model, unless shared) at least ``tau``
        similar to ``question`` (paraphrases), most similar first; no guard is applied and
        no hit counted."""
        question = check_question(question)
        tau = check_tau(tau)
        scope = check_scope(scope)
        with self._lock:
            self._sync()
            if not self._mem.slots:
                return []
        vector = self._vector(question, embedding)
        with self._lock:
            self._sync()
            found = self._mem.search(vector, k, scope, self.model(), self._shared())
            out = []
            for i, sim in found:
                if sim >= tau and (entry := self._rows.fetch(i)) is not None:
                    out.append(QAMatch(entry, sim, {}))
            return out

    def lookup(
        self,
        question: str,
        *,
        tau: float,
        scope: str | None = None,
        retrieved: Sequence[str] | None = None,
        min_overlap: float = DEFAULT_MIN_OVERLAP,
        key_terms: bool = True,
        meaning: Collection[str] = DEFAULT_MEANING_GUARDS,
        embedding: np.ndarray | None = None,
        k: int = 5,
        audit: bool = False,
        max_new_tokens: int | None = None,
    ) -> LookupResult:
        """Serve the most similar stored answer of ``scope`` that passes every guard.

        The ``k`` nearest questions of the scope (answered by this model, unless shared)
        are judged in order of similarity (see :mod:`percache_plugin.rag.guards`); the
        first that passes is served and its hit count and last access are updated
        (best-effort: a read-only or full store still serves).

        :param retrieved: chunk ids retrieved for ``question``; turns on the consistency
            guard (``None``: off).
        :param min_overlap: least share of an entry's sources that must be in ``retrieved``.
        :param key_terms: the key-terms guard (names, acronyms, numbers must agree).
        :param meaning: the meaning guards to run (``guards.MEANING_GUARDS``; empty: none).
        :param audit: also run the ``residue``, ``align``, ``combined`` and ``joint`` guards when off, to
            count the hits they would have refused (``served_with_guard_off``); it costs an
            embedder call per lookup whose candidates reach ``tau``. The other switched-off
            guards are always counted (they compare precomputed features).
        :param max_new_tokens: the request's length cap: turns on the ``length`` guard, only
            answers greedy decoding with that cap gives (or begins with) are served
            (:mod:`percache_plugin.rag.qa_length`); ``None``: off.
        """
        question = check_question(question)
        meaning = check_meaning(meaning)
        tau = check_tau(tau)
        scope = check_scope(scope)
        min_overlap = check_min_overlap(min_overlap)
        got = None if retrieved is None else frozenset(check_ids(retrieved, "retrieved"))
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        with self._lock:
            self._sync()
            empty = not self._mem.slots
        vector = None if empty else self._vector(question, embedding)
        embedded = None
        if vector is not None and (meaning & EMBEDDED_GUARDS or audit):
            embedded = self._embedded(question, vector, tau=tau, k=k, scope=scope,
                                      retrieved=got, min_overlap=min_overlap,
                                      key_terms=key_terms, meaning=meaning, audit=audit)
        with self._lock:
            self._sync()
            self._counters["lookups"] += 1
            found = [] if vector is None else self._mem.search(
                vector, k, scope, self.model(), self._shared()
            )
            judged, served = judge_candidates(
                question, found, self._mem.slots, tau=tau, retrieved=got,
                min_overlap=min_overlap, key_terms=key_terms, meaning=meaning,
                embedded=embedded, embedder=self._embedder, cap=max_new_tokens,
            )
            first = self._match(judged[0]) if judged else None
            if served is not None:
                match = self._match(served)
                if match is not None:
                    try:
                        self._rows.count_hit(match.entry.id)
                    except sqlite3.Error as exc:
                        self._counters["write_errors"] += 1
                        log.warning("percache QA bank: counting a hit failed (%s)", exc)
                    self._counters["hits"] += 1
                    for guard in served[2].off_failed:
                        self._counters[f"off_failed_{guard}"] += 1
                    return LookupResult(match, first if len(judged) > 1 else match, None)
            # Never "scope": that would tell the caller what another scope holds.
            reason = judged[0][2].rejected_by if judged and first is not None else None
            self._counters["misses"] += 1
            if reason is not None:
                self._counters[f"rejected_{reason}"] += 1
            return LookupResult(None, first, reason)

    def _embedded(self, question: str, vector: np.ndarray, *, tau: float, k: int,
                  scope: str | None, retrieved: frozenset[str] | None, min_overlap: float,
                  key_terms: bool, meaning: frozenset[str],
                  audit: bool) -> dict[int, dict[str, bool] | None]:
        """The verdicts of the guards that need the embedder (those on, or all when
        auditing) for each candidate where they decide (reaching ``tau`` and passing every
        other guard; None for the other candidates found). The candidates are judged under
        the lock; the embedder runs outside it, once per guard for all of them."""
        guards = EMBEDDED_GUARDS if audit else meaning & EMBEDDED_GUARDS
        others = meaning - EMBEDDED_GUARDS
        with self._lock:
            self._sync()
            found = self._mem.search(vector, k, scope, self.model(), self._shared())
            seen = [(i, (self._mem.slots[i].info.question, self._mem.slots[i].shape), sim,
                     sim >= tau and judge_candidates(
                question, [(i, sim)], self._mem.slots, tau=tau, retrieved=retrieved,
                min_overlap=min_overlap, key_terms=key_terms, meaning=others)[1] is not None)
                for i, sim in found]
        todo = [(i, s, sim) for i, s, sim, decides in seen if decides]
        if todo and guards & {"align", "combined", "joint"} and not can_align(self._embedder):
            with self._lock:
                self._counters["align_unavailable"] += 1
        verdicts = embedded_verdicts(question, [(q, s, sim) for _, (q, s), sim in todo],
                                     guards, self._embedder)
        out: dict[int, dict[str, bool] | None] = {i: None for i, *_ in seen}
        out.update({i: ok for (i, _, _), ok in zip(todo, verdicts, strict=True)})
        return out

    def _match(self, candidate: Judged) -> QAMatch | None:
        entry_id, sim, verdict = candidate
        entry = self._rows.fetch(entry_id)
        if entry is None:  # unreadable row: removed, a miss
            if entry_id in self._mem.slots:
                self._mem.forget(entry_id)
            return None
        return QAMatch(entry, sim, verdict.guards)

    def get(self, entry_id: int) -> QAEntry | None:
        with self._lock:
            self._sync()
            return self._rows.fetch(entry_id) if entry_id in self._mem.slots else None

    def entries(
        self,
        *,
        scope: str | None | AllScopes = ALL_SCOPES,
        stale: bool | None = None,
        answered: bool | None = None,
    ) -> list[QAEntry]:
        """Entries of every model in id order, optionally filtered by scope (``ALL_SCOPES``:
        any; ``None``: unscoped only), staleness and whether they have an answer."""
        where: list[str] = ["1"]
        params: list[object] = []
        if not isinstance(scope, AllScopes):
            where.append("scope_key = ?")
            params.append(json.dumps(check_scope(scope)))
        if stale is not None:
            where.append("stale = ?")
            params.append(int(bool(stale)))
        if answered is not None:
            where.append("answer IS NOT NULL" if answered else "answer IS NULL")
        with self._lock:
            self._sync()
            return self._rows.select(" AND ".join(where), params)

    def total_bytes(self) -> int:
        return self._mem.total

    @property
    def byte_limit(self) -> int | None:
        return self._byte_limit

    def __len__(self) -> int:
        with self._lock:
            if not self._closed:
                self._sync()
            return len(self._mem.slots)

    def stats(self) -> dict[str, object]:
        """Sizes and this session's counters (lookups, hits, misses, rejections, evictions,
        unreadable rows removed, failed hit-count writes). ``served_with_guard_off``: per
        meaning guard, the hits served while it was switched off that it would have refused."""
        with self._lock:
            slots: list[Slot] = list(self._mem.slots.values())
            return {
                "entries": len(slots),
                "answered": sum(s.info.answered for s in slots),
                "stale": sum(s.stale for s in slots),
                "scopes": len({s.info.scope for s in slots}),
                "bytes": self._mem.total,
                "byte_limit": self._byte_limit,
                "embedder": getattr(self._embedder, "name", None),
                "lookups": self._counters["lookups"],
                "hits": self._counters["hits"],
                "misses": self._counters["misses"],
                "rejected": {r: self._counters[f"rejected_{r}"] for r in REASONS},
                "served_with_guard_off": {g: self._counters[f"off_failed_{g}"]
                                          for g in MEANING_GUARDS},
                "evictions": self._counters["evictions"],
                "corrupt_rows": self._rows.corrupt,
                "write_errors": self._counters["write_errors"],
                "align_unavailable": self._counters["align_unavailable"],
            }

    def __enter__(self) -> QABank:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
