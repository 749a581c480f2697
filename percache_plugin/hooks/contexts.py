"""The narrow objects hooks receive instead of the handle.

A hook sees what its job needs and nothing else: engine-side hooks (attention, planning,
loading, storing, recompute, request start/end) get an :class:`EngineContext`; the ask()
pipeline's hooks (retrieval, QA bank, documents) get an :class:`AssistantContext`. Both are
built once per handle; ``config`` always holds the handle's current settings.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.capabilities import Capabilities
from ..core.query import Query

if TYPE_CHECKING:
    from ..buffer.policies import PolicyFactory
    from ..config import Config
    from ..forget_journal import ForgetJournal
    from ..idle import IdleQueue
    from ..kv.recompute import RecomputeStrategy
    from ..kv.store import KVStore
    from ..predict.state import PredictionState
    from ..rag.embeddings import Embedder
    from .manager import Hooks

__all__ = ["EngineContext", "AssistantContext"]


class EngineContext:
    """What engine-side hooks may use.

    :ivar config: the handle's current settings (replaced by ``configure()``).
    :ivar store: the K/V store (``contains``/``info`` answer without loading tensors).
    :ivar capabilities: what percache can do on this model.
    :ivar hooks: the typed hook façade, to call other hooks.
    :ivar fingerprint: the model/tokenizer fingerprint the store is keyed by.
    :ivar tokenizer: the model's tokenizer.
    :ivar use_template: whether prompts are rendered with the tokenizer's chat template
        (``config.chat_template`` resolved against the tokenizer).
    :ivar recompute_strategies: the recompute strategies registered for this handle.
    :ivar buffer_policies: the RAM tier's replacement policies registered for this handle
        (``Config.ram_cache_policy`` names one); None: the built-ins.
    :ivar generation_config: returns the model's ``generation_config`` as it is now (``generate``
        applies it to every answer), or None.
    :ivar every_store: returns the K/V stores of every model fingerprint under the store's
        path, ``store`` first (what removing a source cleans: K/V of other weights too).
    """

    def __init__(self, config: Config, store: KVStore, capabilities: Capabilities, hooks: Hooks,
                 fingerprint: str, tokenizer: Any, use_template: bool,
                 recompute_strategies: Mapping[str, RecomputeStrategy],
                 buffer_policies: Mapping[str, PolicyFactory] | None = None,
                 generation_config: Callable[[], Any] | None = None,
                 every_store: Callable[[], list[KVStore]] | None = None) -> None:
        self.config = config
        self.store = store
        self.capabilities = capabilities
        self.hooks = hooks
        self.fingerprint = fingerprint
        self.tokenizer = tokenizer
        self.use_template = use_template
        self.recompute_strategies = recompute_strategies
        self.buffer_policies = buffer_policies
        self.generation_config: Callable[[], Any] = generation_config or (lambda: None)
        self.every_store: Callable[[], list[KVStore]] = every_store or (lambda: [self.store])

    def __repr__(self) -> str:
        return f"EngineContext({self.capabilities.model_type}, store={self.store.path or 'memory'})"


class AssistantContext:
    """What the ask() pipeline's hooks may use.

    :ivar engine: the engine context (settings, K/V store, capabilities).
    :ivar foreground: a context manager that preempts idle work and holds the engine for a
        change made outside a request (a bank removing chunks): an idle task computing from
        them either finishes first, and what it stored is forgotten with them, or stops and
        runs again after the change.
    :ivar forget_journal: the journal of forgets (``forget_journal``): a removal whose
        answers, K/V or predictions could not all be deleted is completed later (None: none).
    """

    def __init__(self, engine: EngineContext, embedder: Callable[[], Embedder],
                 idle_queue: Callable[[], IdleQueue],
                 prediction_state: Callable[[], PredictionState] | None = None,
                 foreground: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
                 forget_journal: ForgetJournal | None = None) -> None:
        self.engine = engine
        self.foreground = foreground
        self.forget_journal = forget_journal
        self._embedder = embedder
        self._idle_queue = idle_queue
        self._prediction_state = prediction_state

    @property
    def config(self) -> Config:
        """The handle's current settings."""
        return self.engine.config

    @property
    def hooks(self) -> Hooks:
        return self.engine.hooks

    @property
    def embedder(self) -> Embedder:
        """The banks' embedder (loaded on first use)."""
        return self._embedder()

    @property
    def idle_queue(self) -> IdleQueue:
        """Work deferred to idle time (push tasks here)."""
        return self._idle_queue()

    @property
    def prediction_state(self) -> PredictionState | None:
        """The prediction layer's abstracts and pending chunks (None: no assistant keeps one)."""
        return None if self._prediction_state is None else self._prediction_state()

    def data_path(self, name: str) -> Path | None:
        """Where a component named ``name`` keeps its files beside the K/V store (None: memory)."""
        root = self.engine.store.path
        return None if root is None else root / name

    def query(self, text: str) -> Query:
        """A :class:`Query` for ``text`` that embeds with the banks' embedder, once."""
        return Query(text, lambda texts: self.embedder.embed(texts))
