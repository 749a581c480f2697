"""The QA bank's opening, synchronisation with the database and every write; see
:mod:`percache_plugin.rag.qa_bank` for the class to use."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np

from percache_plugin.rag.embeddings import Embedder
from percache_plugin.rag.qa_length import AnswerTokens
from percache_plugin.rag.qa_memory import QAMemory
from percache_plugin.rag.qa_recheck import RetrieveMany, moved, one_by_one
from percache_plugin.rag.qa_rows import ENTRY_OVERHEAD, QARows, RowInfo
from percache_plugin.rag.qa_types import (
    DEFAULT_BYTE_LIMIT,
    ORIGINS,
    EntryTooLargeError,
    Origin,
    QAEntry,
    check_answer,
    check_ids,
    check_limit,
    check_question,
    check_scope,
    qkey,
)

__all__ = ["ModelId", "QABankBase", "Switch"]

log = logging.getLogger("percache")
ModelId = str | Callable[[], str] | None
Switch = bool | Callable[[], bool]


class QABankBase:
    """Answered questions of one store, searchable by meaning; thread-safe.

    :param path: the SQLite database file (the store's ``percache.sqlite3``), shared with
        the other components; ``None`` keeps the bank in memory.
    :param embedder: embeds questions; a bank refuses to open with another embedder
        (by ``name``) than the one its stored vectors came from.
    :param byte_limit: most bytes of entries kept (``None``: no limit); see ``QAEntry.nbytes``.
    :param exact_search_limit: a partition with more entries is searched through HNSW
        (approximate, sub-millisecond) instead of an exact scan.
    :param model: the fingerprint of the model answering now (a callable is asked at every
        call, so an adapter switch takes effect at once); stored with every entry and
        required of every entry served. ``None``: entries carry no model (``""``).
    :param share_across_models: serve entries another model answered too (a callable is
        asked at every lookup).
    """

    def __init__(
        self,
        path: Path | str | None,
        embedder: Embedder,
        *,
        byte_limit: int | None = DEFAULT_BYTE_LIMIT,
        exact_search_limit: int = 4096,
        model: ModelId = None,
        share_across_models: Switch = False,
    ) -> None:
        if not callable(getattr(embedder, "embed", None)):
            raise TypeError(f"embedder must have an embed() method, got {type(embedder).__name__}")
        if isinstance(exact_search_limit, bool) or not isinstance(exact_search_limit, int):
            raise ValueError(f"exact_search_limit must be an int, got {exact_search_limit!r}")
        self._embedder = embedder
        self._byte_limit = check_limit(byte_limit)
        self._model = model
        self._share = share_across_models
        self._lock = threading.RLock()
        self._closed = False
        self._counters: Counter[str] = Counter()
        self.path = None if path is None else Path(path).expanduser()
        if self.path is not None and self.path.is_dir():
            raise IsADirectoryError(
                f"QA bank path {str(self.path)!r} is a directory; pass the database file, "
                f"e.g. {str(self.path / 'percache.sqlite3')!r}"
            )
        self._rows = QARows(self.path, embedder.name)
        self._mem = QAMemory(max(1, exact_search_limit))
        self._generation = -1
        try:
            self._sync()
        except BaseException:
            self.close()
            raise

    # -- helpers -------------------------------------------------------------------------

    def model(self) -> str:
        """The fingerprint entries are stored under and served to now."""
        model = self._model() if callable(self._model) else self._model
        return "" if model is None else str(model)

    def _shared(self) -> bool:
        return bool(self._share() if callable(self._share) else self._share)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the QA bank is closed")

    def _sync(self) -> None:
        """Re-read the rows if another bank changed them since this one last looked."""
        self._check_open()
        generation = self._rows.generation()
        if generation == self._generation:
            return
        known = {i: s.info for i, s in self._mem.slots.items()}
        seen: set[int] = set()
        for info, vector in self._rows.infos(known):
            seen.add(info.id)
            self._mem.put(info, vector, self._rows.dim)
        for entry_id in set(known) - seen:
            self._mem.forget(entry_id)
        # the generation read before the rows: a change committed while they were read (another
        # process marking one stale) is newer, so the next look reads them again
        self._generation = generation

    def _vector(self, question: str, embedding: object) -> np.ndarray:
        raw = self._embedder.embed([question]) if embedding is None else embedding
        vector = np.array(raw, dtype=np.float32)
        if vector.ndim == 2 and vector.shape[0] == 1:
            vector = vector[0]
        dim = self._rows.dim
        if dim is None and embedding is not None:  # a caller's vector: check the size
            dim = int(self._embedder.dim)
        if vector.ndim != 1 or (dim is not None and vector.size != dim):
            raise ValueError(
                f"question embedding must have shape [{dim or 'dim'}], got {list(vector.shape)}"
            )
        norm = float(np.linalg.norm(vector))
        if not np.isfinite(vector).all() or norm == 0.0:
            raise ValueError("question embedding is all-zero or not finite")
        return vector / norm

    def _fetch(self, entry_id: int) -> QAEntry:
        entry = self._rows.fetch(entry_id)
        if entry is None:
            if entry_id in self._mem.slots:
                self._mem.forget(entry_id)
            raise KeyError(f"no QA bank entry {entry_id}")
        return entry

    def _fits(self, nbytes: int) -> None:
        if self._byte_limit is not None and nbytes > self._byte_limit:
            raise EntryTooLargeError(
                f"QA entry of {nbytes} bytes exceeds the whole byte limit ({self._byte_limit})"
            )

    @contextmanager
    def _change(self) -> Iterator[None]:
        """One transaction; when no other bank wrote since this one last looked, this
        bank's own change does not make it re-read the rows."""
        with self._rows.tx():
            before = self._rows.generation()
            yield
            after = self._rows.generation()
        self._generation = after if before == self._generation else -1

    def _committed(self, victims: Sequence[int]) -> None:
        """Memory follows a committed change: drop the evicted."""
        for victim in victims:
            if victim in self._mem.slots:
                self._mem.forget(victim)
        self._counters["evictions"] += len(victims)

    # -- writing -------------------------------------------------------------------------

    def add(
        self,
        question: str,
        answer: str | None,
        *,
        scope: str | None = None,
        sources: Sequence[str] = (),
        origin: Origin = "user",
        embedding: np.ndarray | None = None,
        tokens: AnswerTokens | None = None,
    ) -> QAEntry:
        """Store an answered (or, with ``answer=None``, prefill-only) question.

        An identical question (case and whitespace aside) in the same scope, answered by the
        same model, is replaced: same id, hit count and vector; new wording, answer,
        sources and origin; not stale. Another handle or process may have stored it
        meanwhile: the write is an upsert. Other entries are evicted (LFU) if the byte
        limit is exceeded.

        :param sources: ids of the chunks the answer was generated from.
        :param embedding: the question's embedding, if the caller has it already.
        :param tokens: the ids the answer was generated as and how its generation ended, which
            decide the ``max_new_tokens`` it is served to (``lookup``); ``None``: an answer the
            caller gives (``"given"``, served whole to any cap, as a correction is), see
            :mod:`percache_plugin.rag.qa_length`.
        """
        question = check_question(question)
        answer = check_answer(answer, optional=True)
        scope = check_scope(scope)
        source_ids = check_ids(sources, "sources")
        if origin not in ORIGINS:
            raise ValueError(f"origin must be one of {ORIGINS}, got {origin!r}")
        model, key = self.model(), qkey(question)
        # Embed outside the lock (tens of ms); an identical question needs no vector.
        known = (scope, model, key) in self._mem.keys
        vector = None if known else self._vector(question, embedding)
        with self._lock:
            self._sync()
            existing = self._mem.keys.get((scope, model, key))
            if existing is None and vector is None:  # deleted since the check above
                vector = self._vector(question, embedding)
            ids = None if tokens is None else tuple(tokens.ids)
            ended = tokens.ended if tokens is not None else None if answer is None else "given"
            info = self._info(existing or 0, question, key, scope, model, source_ids, answer,
                              ids, ended)
            return self._fetch(self._write(existing, info, answer, origin, vector, ids))

    def _info(self, entry_id: int, question: str, key: str, scope: str | None, model: str,
              sources: tuple[str, ...], answer: str | None, ids: tuple[int, ...] | None,
              ended: str | None) -> RowInfo:
        dim = self._rows.dim or int(self._embedder.dim)
        text = len(question.encode()) + len((answer or "").encode()) + 4 * len(ids or ())
        nbytes = text + len(str(list(sources)).encode()) + 4 * dim + ENTRY_OVERHEAD
        return RowInfo(entry_id, question, key, scope, model, sources, False,
                       answer is not None, nbytes, None if ids is None else len(ids), ended)

    def _write(self, existing: int | None, info: RowInfo, answer: str | None, origin: str,
               vector: np.ndarray | None, ids: tuple[int, ...] | None = None) -> int:
        """Update entry ``existing`` or upsert a new one (``vector`` given), evicting what no
        longer fits, in one transaction; memory follows the commit. Returns the entry id."""
        self._fits(info.nbytes)
        old_bytes = 0 if existing is None else self._mem.slots[existing].info.nbytes
        with self._change():
            if existing is not None:
                self._rows.update(existing, info, answer, origin, ids)
                entry_id = existing
            else:
                assert vector is not None
                if self._rows.dim is None:
                    self._rows.set_dim(vector.size)
                entry_id = self._rows.upsert(info, answer, origin, vector, ids)
            victims = self._rows.victims(
                self._mem.total - old_bytes + info.nbytes, self._byte_limit, entry_id
            )
            self._rows.delete(victims)
        stored = replace(info, id=entry_id)
        self._mem.put(stored, vector, self._rows.dim)
        self._committed(victims)
        return entry_id

    def correct(self, entry_id: int, answer: str) -> QAEntry:
        """Replace an entry's answer by a user's correction (origin ``"corrected"``, not
        stale). Raises KeyError for an unknown id."""
        answer = check_answer(answer, optional=False)  # type: ignore[assignment]
        with self._lock:
            self._sync()
            old = self._mem.slots.get(entry_id)
            if old is None:
                raise KeyError(f"no QA bank entry {entry_id}")
            o = old.info
            info = self._info(entry_id, o.question, o.key, o.scope, o.model, o.sources, answer,
                              None, "given")  # served whole to any cap: not a generation
            return self._fetch(self._write(entry_id, info, answer, "corrected", None))

    def delete(self, entry_id: int) -> bool:
        """Remove an entry; False if there was none with this id."""
        with self._lock:
            self._sync()
            if entry_id not in self._mem.slots:
                return False
            with self._change():
                self._rows.delete([entry_id])
            self._mem.forget(entry_id)
            return True

    def mark_stale_for(
        self,
        new_chunk_ids: Iterable[str],
        retrieve: Callable[[str, str | None, np.ndarray | None], Sequence[str] | None] | None = None,
        cannot_tell: Callable[[str, str | None], bool] | None = None,
        *,
        retrieve_many: RetrieveMany | None = None,
    ) -> list[int]:
        """Mark stale every fresh entry whose question now retrieves other chunks than those it
        was answered from: one of the new chunks, or an old chunk that the documents added or
        removed moved into its top-k (BM25 weighs a word by how many chunks hold it, so a
        change elsewhere in the scope reorders chunks it did not touch).

        ``retrieve(question, scope, vector)`` must return the chunk ids of the question's top-k
        as the knowledge bank retrieves them now (new chunks included), or None for an entry
        the change cannot affect (another scope); ``vector`` is the question's stored embedding
        (None when unreadable), so questions need not be embedded again. ``retrieve_many``
        instead takes every fresh entry's ``(question, scope, vector)`` at once and returns
        their retrievals in order (:mod:`.qa_recheck`); either is called outside the bank's
        lock. ``cannot_tell(model, scope)``: True for an entry whose retrieval it does not
        reproduce (answered under other retrieval settings, ``model``); it is marked stale
        without retrieval. Returns the ids marked stale.
        """
        new = set(check_ids(new_chunk_ids, "new_chunk_ids"))
        if (retrieve is None) == (retrieve_many is None):
            raise TypeError("mark_stale_for needs one of retrieve and retrieve_many")
        with self._lock:
            self._sync()
            fresh = self._rows.fresh()
        batch = retrieve_many if retrieve_many is not None else one_by_one(retrieve)  # type: ignore[arg-type]
        return self.mark_stale(moved(fresh, new, self._rows.dim, batch, cannot_tell))

    def mark_stale(self, entry_ids: Iterable[int]) -> list[int]:
        """Mark entries stale (not served until corrected or regenerated), e.g. when a user's
        correction or a regenerated answer contradicts them. Returns the ids marked."""
        with self._lock:
            self._sync()
            hit = [i for i in dict.fromkeys(entry_ids) if i in self._mem.slots]
            with self._change():
                self._rows.mark_stale(hit)
            for entry_id in hit:
                self._mem.slots[entry_id].stale = True
            return hit

    def set_byte_limit(self, byte_limit: int | None) -> int:
        """Change the byte limit (``None``: unlimited); returns how many entries were evicted."""
        limit = check_limit(byte_limit)
        with self._lock:
            self._sync()
            self._byte_limit = limit
            with self._change():
                victims = self._rows.victims(self._mem.total, limit, None)
                self._rows.delete(victims)
            self._committed(victims)
            return len(victims)

    def scrub(self) -> bool:
        """Checkpoint the database after deletions, so its file keeps no deleted entry's text
        (``sqlite_tx.checkpoint``); False when a reader elsewhere kept WAL frames."""
        with self._lock:
            return self._rows.scrub()

    def close(self) -> None:
        """Close the database connection (idempotent)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._rows.close()
