"""What a PerCache handle is made of: read-only views of its engine's and assistant's parts."""

from __future__ import annotations

from typing import Any

import pluggy

from ..assistant import Assistant
from ..attention.rope import RopeShifter
from ..config import Config
from ..core.capabilities import Capabilities
from ..engine import Engine
from ..hooks.manager import Hooks
from ..idle import IdleQueue
from ..kv.store import KVStore
from ..predict.state import PredictionState
from ..rag.embeddings import Embedder
from ..rag.knowledge import KnowledgeBank
from ..rag.qa_bank import QABank

__all__ = ["HandleParts"]


class HandleParts:
    """The parts of a handle (:class:`~percache_plugin.handle.PerCache`), each its engine's or
    its assistant's."""

    engine: Engine
    assistant: Assistant

    @property
    def model(self) -> Any:
        return self.engine.model

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer

    @property
    def config(self) -> Config:
        """The current settings (change them with :meth:`configure`)."""
        return self.engine.config

    @property
    def store(self) -> KVStore:
        return self.engine.store

    @property
    def plugins(self) -> pluggy.PluginManager:
        return self.engine.plugins

    @property
    def hooks(self) -> Hooks:
        return self.engine.hooks

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the weights in use (checked again at every request)."""
        return self.engine.follow_model()

    def refresh_fingerprint(self) -> str:
        """Hash every weight again: needed only after writes through ``param.data``, which
        bypass the version counters the per-request check reads."""
        return self.engine.refresh_fingerprint()

    @property
    def capabilities(self) -> Capabilities:
        return self.engine.capabilities

    @property
    def shifter(self) -> RopeShifter | None:
        return self.engine.shifter

    @property
    def n_parameters(self) -> int:
        return self.engine.n_parameters

    @property
    def enabled(self) -> bool:
        return self.engine.enabled

    @property
    def embedder(self) -> Embedder:
        """The banks' embedder (loaded on first use)."""
        return self.assistant.embedder

    @property
    def knowledge(self) -> KnowledgeBank:
        """The knowledge bank: chunks of the documents added, with their hybrid index."""
        return self.assistant.knowledge

    @property
    def qa_bank(self) -> QABank:
        """Answered questions: list, correct and delete entries here."""
        return self.assistant.qa_bank

    @property
    def idle_queue(self) -> IdleQueue:
        """Work deferred to :meth:`idle` (persistent with an on-disk store)."""
        return self.assistant.idle_queue

    @property
    def prediction_state(self) -> PredictionState:
        """Per-scope abstract, chunks waiting for it, and recent questions."""
        return self.assistant.prediction_state

    @property
    def background_stats(self) -> Any:
        """Background compute per idle task kind."""
        return self.assistant.background_stats
