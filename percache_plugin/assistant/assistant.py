"""The personal assistant over an engine: knowledge bank, QA bank, ask(), idle work, the worker.

The banks belong to the built-in plugins that serve their hooks
(:mod:`percache_plugin.plugins.banks`); the assistant reaches them through the hooks, and
exposes them for listing and correcting only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..best_effort import best_effort
from ..config import ConfigError
from ..core.query import Query
from ..core.registry import Registry
from ..decode import context_limit
from ..engine import Engine
from ..forget_journal import ForgetJournal, ForgetKind
from ..hooks.contexts import AssistantContext
from ..idle import IdleQueue, IdleReport, IdleTask
from ..kv.store import DB_NAME
from ..plugins.banks import KNOWLEDGE_PLUGIN, QA_BANK_PLUGIN, KnowledgeRetrieval, QABankPlugin
from ..plugins.removal import forget_chunks
from ..predict.state import PredictionState
from ..rag.chunking import Document
from ..rag.embeddings import Embedder, load_embedder
from ..rag.knowledge import AddReport, KnowledgeBank
from ..rag.qa_bank import QABank, QAEntry
from .ask import Answer, answer_if_relevant, ask, prefill_checked
from .calibrate_task import CALIBRATE_KIND, WATCHED, measure_in_idle, queue_calibration
from .disputes import correct as correct_entry
from .disputes import dispute_paraphrases
from .grounded import GroundingCounts
from .idle_context import IdleContext
from .idle_tasks import TaskRunner
from .scheduler import (
    BackgroundStats,
    after_documents,
    after_question,
    queue_conversions,
    queue_knowledge_predictions,
    run_idle,
)
from .worker import IdleWorker

__all__ = ["Assistant"]


class Assistant:
    """ask(), documents and idle work on top of ``engine``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.background_stats = BackgroundStats()
        self.grounding = GroundingCounts()
        self._embedder: Embedder | None = None
        self._idle_queue: IdleQueue | None = None
        self._prediction_state: PredictionState | None = None
        self._worker: IdleWorker | None = None
        self.task_runners: Registry[TaskRunner] = Registry("idle task kind")
        engine.hooks.register_idle_tasks(self.task_runners.register)
        self.forget_journal = ForgetJournal(self._db_path())
        self.ctx = AssistantContext(engine.ctx, lambda: self.embedder, lambda: self.idle_queue,
                                    lambda: self.prediction_state, foreground=self._foreground,
                                    forget_journal=self.forget_journal)
        self.forget_journal.register("chunk", ForgetKind(
            lambda chunk_id: bool(self.hooks.resolve_chunks(self.ctx, [chunk_id])),
            lambda ids: forget_chunks(self.ctx, ids)))
        self.idle_context = IdleContext(
            self.ctx, generate=engine.generate, prefill=lambda segments, **kw: prefill_checked(self, segments, **kw),
            tokenizer=engine.tokenizer,
            n_parameters=engine.n_parameters, prediction_state=lambda: self.prediction_state,
            answer=lambda query, scope, **kw: answer_if_relevant(self, query, scope, **kw),
            served_paraphrases=self._served_paraphrases,
            dispute=lambda entry: len(dispute_paraphrases(self, entry, include_self=True)),
            background_stats=self.background_stats, totals=engine.stats(),
            calibrate=lambda: measure_in_idle(engine), context=context_limit(engine.model))
        queue_calibration(self)  # a lookup; measured in idle time, never here

    @property
    def config(self) -> Any:
        return self.engine.config

    @property
    def hooks(self) -> Any:
        return self.engine.hooks

    @property
    def embedder(self) -> Embedder:
        """The banks' embedder (loaded on first use)."""
        if self._embedder is None:
            self._embedder = load_embedder(self.config.embedder)
        return self._embedder

    def query(self, text: str) -> Query:
        """A question that embeds itself once, with the banks' embedder."""
        return self.ctx.query(text)

    def _served_paraphrases(self, query: Query, scope: str | None) -> list[QAEntry]:
        return self.hooks.qa_similar(self.ctx, query, scope, self.config.similarity_threshold)

    def _builtin(self, name: str) -> Any:
        return self.engine.plugins.get_plugin(name)

    @property
    def knowledge(self) -> KnowledgeBank:
        """The knowledge bank of the built-in retrieval plugin."""
        plugin = self._builtin(KNOWLEDGE_PLUGIN)
        if not isinstance(plugin, KnowledgeRetrieval):
            raise LookupError(f"the built-in knowledge bank is not registered ({KNOWLEDGE_PLUGIN})")
        return plugin.bank(self.ctx)

    @property
    def qa_bank(self) -> QABank:
        """Answered questions of the built-in QA-bank plugin, for listing and deleting (the
        request path and idle work reach the QA bank through hooks only)."""
        plugin = self._builtin(QA_BANK_PLUGIN)
        if not isinstance(plugin, QABankPlugin):
            raise LookupError(f"the built-in QA bank is not registered ({QA_BANK_PLUGIN})")
        return plugin.bank(self.ctx)

    def qa_counters(self) -> tuple[int, int]:
        """QA-bank lookups and hits of this session (hook ``percache_qa_stats``)."""
        counters = self.hooks.qa_stats(self.ctx)
        return int(counters.get("lookups", 0)), int(counters.get("hits", 0))  # type: ignore[call-overload]

    def _db_path(self) -> Any:
        return None if self.engine.store.path is None else self.engine.store.path / DB_NAME

    @property
    def idle_queue(self) -> IdleQueue:
        """Work deferred to idle time (persistent with an on-disk store)."""
        if self._idle_queue is None:
            self._idle_queue = IdleQueue(self._db_path(), kinds=self.task_runners, last=(CALIBRATE_KIND,))
        return self._idle_queue

    @property
    def prediction_state(self) -> PredictionState:
        """Per-scope abstract, chunks waiting for it, and recent questions."""
        if self._prediction_state is None:
            self._prediction_state = PredictionState(self._db_path())
        return self._prediction_state

    def _foreground(self) -> Any:
        return self.engine.preemption.foreground(self.engine.lock)

    def add_documents(self, docs: Any, *, scope: str | None = None) -> AddReport:
        """Add documents (hook ``percache_add_documents``, the default: the knowledge bank);
        stale answers are queued for refresh. A document given again with its id replaces the
        old text: the answers built on its removed chunks are deleted (hook
        ``percache_sources_forgotten``) and so is their K/V under every model fingerprint. Answers built
        on a chunk kept under another document or at another position are deleted too: ask()
        orders a prompt's chunks by document and position."""
        with self._foreground():
            if isinstance(docs, (str, bytes, Mapping, Document)):
                docs = [docs]
            report = self.hooks.add_documents(self.ctx, list(docs), scope)
            if report.replaced_chunks:  # journaled: a failure is completed later (recover_forgets)
                with best_effort("forgetting what was built on replaced chunks", self.engine.stats()):
                    forget_chunks(self.ctx, set(report.replaced_chunks))
            if report.relabelled_chunks:
                self.hooks.sources_forgotten(self.ctx, report.relabelled_chunks)
            self.hooks.documents_added(self.ctx, report)
            by_scope: dict[str | None, list[str]] = {}
            for c in report.new_chunks:
                by_scope.setdefault(c.scope, []).append(c.id)
            for chunk_scope, ids in by_scope.items():
                after_documents(self, chunk_scope, ids)
            return report

    def ask(self, query: str, *, scope: str | None = None, **generate_kwargs: Any) -> Answer:
        """Answer from the QA bank if a stored question matches, else retrieve and generate."""
        q = self.query(query)  # validates before taking the lock
        with self._foreground():
            self.engine.follow_model()  # QA answers are looked up under the weights in use
            self.forget_journal.recover()  # one read of an empty table unless a forget failed
            answer = ask(self, q, scope, **generate_kwargs)
            with best_effort("recording the question for prediction", self.engine.stats()):
                after_question(self, query, scope)
            return answer

    def idle(self, budget_s: float | None = None, max_tasks: int | None = None, *,
             progress: bool = False) -> IdleReport:
        """Run deferred work now, in this thread, without waiting for the quiet period (see
        :meth:`PerCache.idle`); ``progress=True`` shows a progress bar of the tasks."""
        with self.engine.lock:
            self.forget_journal.recover()
            if not progress:
                return run_idle(self, budget_s, max_tasks, ignore_quiet=True)
            from tqdm import tqdm

            with tqdm(total=len(self.idle_queue), desc="idle work", unit="task") as bar:
                def step(task: IdleTask) -> None:
                    bar.total = max(bar.total, bar.n + 1 + len(self.idle_queue))
                    bar.set_postfix_str(task.kind)
                    bar.update(1)

                return run_idle(self, budget_s, max_tasks, ignore_quiet=True, on_task=step)

    def correct(self, entry_id: int, answer: str) -> QAEntry:
        """Correct a stored answer; its stored paraphrases stop being served (see
        :meth:`PerCache.correct`)."""
        with self._foreground():
            return correct_entry(self, entry_id, answer)

    def predict(self, kind: str = "knowledge", *, scope: str | None = None, rounds: int = 1) -> int:
        """Queue predictions now: ``"knowledge"`` (questions about each chunk of ``scope``) or
        ``"history"`` (from recent questions); returns how many were queued."""
        if kind not in ("knowledge", "history"):
            raise ValueError(f"kind must be 'knowledge' or 'history', got {kind!r}")
        if kind == "knowledge":
            ids = self.hooks.list_chunks(self.ctx, scope)
            return queue_knowledge_predictions(self, scope, ids, rounds=rounds)
        return sum(self.idle_queue.push("predict_history", f"manual round {r + 1}", scope)
                   for r in range(rounds))

    def check(self, config: Any, changed: set[str]) -> None:
        """Raise :class:`ConfigError` if ``config`` cannot apply (a new embedder once vectors
        of the current one exist: they would not be comparable)."""
        if "embedder" in changed and self._embedder is not None:
            raise ConfigError(
                f"embedder cannot change once the banks hold vectors of {self._embedder.name!r}; "
                "use a new store (or set it in enable())")

    def configure(self, old: Any, changed: set[str]) -> None:
        """React to new settings (checked with :meth:`check`): the embedder, chunk size and QA
        byte limit, and conversions between K/V and QA."""
        if "embedder" in changed:
            self._embedder = None  # not loaded yet (check() refused otherwise): load the new one
        self.hooks.configured(self.ctx, changed)  # chunk size, QA byte limit
        if {"similarity_threshold", "population_cutoff", "kv_byte_limit"} & changed:
            queue_conversions(self, old, self.config)
        if WATCHED & changed:
            queue_calibration(self)

    # -- background work --------------------------------------------------------------------
    def start_idle_worker(self, *, poll_s: float = 0.2) -> IdleWorker:
        """Run idle work in a background thread; foreground calls preempt it."""
        with self.engine.lock:
            if self._worker is not None and self._worker.running:
                return self._worker
            self._worker = IdleWorker(self._background_step, lambda: self.idle_queue.peek() is not None,
                                      self.engine.preemption, poll_s=poll_s)
            self._worker.start()
            return self._worker

    def stop_idle_worker(self) -> IdleReport | None:
        worker, self._worker = self._worker, None
        if worker is None:
            return None
        worker.stop()
        return worker.report

    def _background_step(self) -> IdleReport:
        """One task, if no foreground call waits (called by the worker thread)."""
        with self.engine.lock:
            if self.engine.preemption.flag.is_set():
                return IdleReport()
            self.forget_journal.recover()
            return run_idle(self, max_tasks=1)

    def close(self) -> None:
        """Stop the worker and release the plugins' and the assistant's files."""
        self.stop_idle_worker()
        with self.engine.lock:
            self.hooks.close(self.ctx)
            for part in (self._idle_queue, self._prediction_state, self.forget_journal):
                if part is not None:
                    part.close()

