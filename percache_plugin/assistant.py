"""The assistant half of the handle: knowledge bank, QA bank, ask(), idle work, the worker.

:class:`~percache_plugin.engine.PerCache` inherits these methods; they rely on its lock,
its store, its hooks and :meth:`PerCache.generate` / :meth:`PerCache.prefill`.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .ask import Answer, ask
from .idle import IdleQueue, IdleReport
from .kv.store import DB_NAME
from .predict.state import PredictionState
from .rag.embeddings import Embedder, load_embedder
from .rag.knowledge import AddReport, KnowledgeBank
from .rag.qa_bank import QABank
from .scheduler import after_documents, after_question, run_idle
from .segments import Segment
from .worker import IdleWorker

if TYPE_CHECKING:
    from .config import Config
    from .hooks.manager import Hooks
    from .kv.store import KVStore

__all__ = ["AssistantMixin"]


class AssistantMixin:
    """Methods of :class:`~percache_plugin.engine.PerCache` for the personal assistant."""

    # Provided by PerCache.
    config: Config
    store: KVStore
    hooks: Hooks
    _lock: threading.RLock
    _preempt: threading.Event
    _fg_count: int
    _fg_mutex: threading.Lock
    _worker: IdleWorker | None
    _embedder: Embedder | None
    _knowledge: KnowledgeBank | None
    _qa_bank: QABank | None
    _idle_queue: IdleQueue | None
    _prediction_state: PredictionState | None

    def query_embedding(self, text: str) -> np.ndarray:
        """The embedding of a question, computed once per request: retrieval and the QA-bank
        lookup of ``ask()`` both need it (a small memo of recent questions)."""
        memo = self.__dict__.setdefault("_query_memo", OrderedDict())
        if text in memo:
            memo.move_to_end(text)
            return memo[text]
        vec = self.embedder.embed([text])[0]
        memo[text] = vec
        if len(memo) > 64:
            memo.popitem(last=False)
        return vec

    @property
    def embedder(self) -> Embedder:
        """The banks' embedder (loaded on first use)."""
        if self._embedder is None:
            self._embedder = load_embedder(self.config.embedder)
        return self._embedder

    def _db_path(self) -> Path | None:
        return None if self.store.path is None else self.store.path / DB_NAME

    @property
    def knowledge(self) -> KnowledgeBank:
        """The knowledge bank: chunks of the documents added, with their hybrid index."""
        if self._knowledge is None:
            directory = None if self.store.path is None else self.store.path / "knowledge"
            self._knowledge = KnowledgeBank(directory, self.embedder, chunk_words=self.config.chunk_words)
        return self._knowledge

    @property
    def qa_bank(self) -> QABank:
        """Answered questions: list, correct and delete entries here."""
        if self._qa_bank is None:
            self._qa_bank = QABank(self._db_path(), self.embedder, byte_limit=self.config.qa_byte_limit)
        return self._qa_bank

    @property
    def idle_queue(self) -> IdleQueue:
        """Work deferred to :meth:`idle` (persistent with an on-disk store)."""
        if self._idle_queue is None:
            self._idle_queue = IdleQueue(self._db_path())
        return self._idle_queue

    def add_documents(self, docs: Any, *, scope: str | None = None) -> AddReport:
        """Add documents (strings, UTF-8 bytes, mappings with ``text``/``id``/``scope``/``metadata``,
        or :class:`Document`) to the knowledge bank; duplicates are stored once. Stored answers
        that the new chunks would change are marked stale and queued for refresh."""
        with self._foreground():
            report = self.knowledge.add_documents(docs, scope=scope)
            self.hooks.documents_added(self, report)
            by_scope: dict[str | None, list[str]] = {}
            for c in report.new_chunks:
                by_scope.setdefault(c.scope, []).append(c.id)
            for chunk_scope, ids in by_scope.items():
                after_documents(self, chunk_scope, ids)
            return report

    def ask(self, query: str, *, scope: str | None = None, **generate_kwargs: Any) -> Answer:
        """Answer from the QA bank if a stored question matches, else retrieve and generate."""
        with self._foreground():
            answer = ask(self, query, scope, **generate_kwargs)
            after_question(self, query, scope)
            return answer

    def idle(self, budget_s: float | None = None, max_tasks: int | None = None) -> IdleReport:
        """Run deferred work now, in this thread: abstracts and predictions, population of
        predicted questions, real answers of QA-bank hits, refresh of stale entries, and the
        scheduler's conversions. Stops when the queue has nothing runnable, after ``max_tasks``,
        or once ``budget_s`` is spent (checked between tasks)."""
        with self._lock:
            return run_idle(self, budget_s, max_tasks)

    @property
    def prediction_state(self) -> PredictionState:
        """Per-scope abstract, chunks waiting for it, and recent questions."""
        if self._prediction_state is None:
            self._prediction_state = PredictionState(self._db_path())
        return self._prediction_state

    def predict(self, kind: str = "knowledge", *, scope: str | None = None, rounds: int = 1) -> int:
        """Queue predictions now (no quiet period): ``"knowledge"`` (from the abstract) or
        ``"history"`` (from recent questions); returns how many were queued."""
        if kind not in ("knowledge", "history"):
            raise ValueError(f"kind must be 'knowledge' or 'history', got {kind!r}")
        return sum(self.idle_queue.push(f"predict_{kind}", f"manual round {r + 1}", scope)  # type: ignore[arg-type]
                   for r in range(rounds))

    def kv_cached(self, segments: Sequence[str | Segment]) -> bool:
        """Whether every reusable piece of this prompt is in the store as an exact prefix."""
        return all(self.store.contains(p.key) for p in self.prompt(segments).reusable)

    # -- background work --------------------------------------------------------------------
    def start_idle_worker(self, *, poll_s: float = 0.2) -> IdleWorker:
        """Run idle work in a background thread; foreground calls preempt it within one decode
        step. Stop it with :meth:`stop_idle_worker` (``disable()`` stops it too)."""
        with self._lock:
            if self._worker is not None and self._worker.running:
                return self._worker
            self._worker = IdleWorker(self, poll_s=poll_s)
            self._worker.start()
            return self._worker

    def stop_idle_worker(self) -> IdleReport | None:
        worker, self._worker = self._worker, None
        if worker is None:
            return None
        worker.stop()
        return worker.report

    def _in_background(self) -> bool:
        return self._worker is not None and threading.get_ident() == self._worker.ident

    def _foreground_waiting(self) -> bool:
        return self._fg_count > 0

    @contextlib.contextmanager
    def _foreground(self) -> Iterator[None]:
        """Hold the handle for a foreground call, preempting background work first."""
        if self._in_background():
            with self._lock:
                yield
            return
        with self._fg_mutex:
            self._fg_count += 1
            self._preempt.set()
        try:
            with self._lock:
                yield
        finally:
            with self._fg_mutex:
                self._fg_count -= 1
                if self._fg_count == 0:
                    self._preempt.clear()

    def _background_step(self) -> IdleReport:
        """One task, if no foreground call waits (called by the worker thread)."""
        with self._lock:
            if self._preempt.is_set():
                return IdleReport()
            return run_idle(self, max_tasks=1)

