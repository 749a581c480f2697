"""The PerCache handle's requests, settings and life cycle, and :func:`enable`."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..assistant import Answer, Assistant
from ..assistant.worker import IdleWorker
from ..config import Config
from ..core.debuglog import ensure_handler
from ..decode import context_limit
from ..decode.calibrate import MEASURE_DEFAULTS
from ..engine import Engine
from ..idle import IdleReport
from ..memory.api import Memory
from ..memory.bank import check_scope
from ..memory.plugin import MEMORY_PLUGIN, MemoryPlugin
from ..personas import Personas
from ..rag.knowledge import AddReport
from ..rag.qa_bank import QAEntry
from ..request import Prefilled
from ..segments import Prompt, Segment
from ..session.reply import Reply
from ..session.sessions import DEFAULT_SESSION, Sessions
from ..stats import Generation, StatsTotals
from ..turnlog import TurnLog, TurnRecord
from .parts import HandleParts

__all__ = ["PerCache", "enable"]


class PerCache(HandleParts):
    """A handle on one enabled model. Create it with :func:`enable`.

    :ivar engine: K/V reuse (generate, prefill, the store, the attention switch).
    :ivar assistant: ask(), the banks and idle work.
    :ivar sessions: chat sessions (create, list, fork, reset, delete).
    :ivar memory: facts (add, search, list, update, history, forget).
    """

    def __init__(self, model: Any, tokenizer: Any, store: str | Path | None, config: Config,
                 plugins: Sequence[object] = ()) -> None:
        self.engine = Engine(model, tokenizer, store, config, plugins)
        self.assistant = Assistant(self.engine)
        self.sessions = Sessions(self.engine, self.engine.ctx.use_template)
        self.memory = Memory(self.assistant.ctx, self._memory_plugin, self.engine.tokenizer,
                             context_limit(self.engine.model))
        self.sessions.attach_memory(self.memory)
        if config.debug_log:
            ensure_handler()
        with self.engine.lock:  # forgets a failure or a crash cut short, here or elsewhere
            self.assistant.forget_journal.recover()

    def _memory_plugin(self) -> MemoryPlugin | None:
        plugin = self.engine.plugins.get_plugin(MEMORY_PLUGIN)
        return plugin if isinstance(plugin, MemoryPlugin) else None

    # -- requests -------------------------------------------------------------------------
    def prompt(self, segments: Sequence[str | Segment]) -> Prompt:
        """Tokenize segments the way :meth:`generate` does (each on its own)."""
        return self.engine.prompt(segments)

    def generate(self, segments: Sequence[str | Segment], **generate_kwargs: Any) -> Generation:
        """Generate from ``[system, chunk, ..., query]`` reusing stored chunk K/V.

        Extra keyword arguments go to ``model.generate`` (``max_new_tokens`` defaults to 64);
        ``prediction=text`` drafts greedy decoding from text the answer is expected to repeat
        (verified: the answer is the same without it; see :meth:`Engine.generate`).
        """
        return self.engine.generate(segments, **generate_kwargs)

    def prefill(self, segments: Sequence[str | Segment] | Prompt) -> Prefilled:
        """Run only the reuse path: a cache holding every prompt position but the last
        (see :meth:`Engine.prefill`). What was computed is stored. ``segments`` may be a
        :class:`Prompt` already built (``kv.blocks.block_prompt`` for plain prompts)."""
        return self.engine.prefill(segments)

    def kv_cached(self, segments: Sequence[str | Segment], scope: str | None = None) -> bool:
        """Whether every reusable piece of this prompt is in the store as an exact prefix
        (``scope``: keyed as that scope's asks key it; their K/V is kept apart per scope)."""
        return self.engine.kv_cached(segments, scope)

    def complete(self, prompt: str | Sequence[int], **generate_kwargs: Any) -> Generation:
        """Generate from a plain prompt (text or token ids), reusing the longest cached token
        prefix of any earlier plain prompt, block by block (``Config.prefix_block_tokens``).
        ``stats.tokens_reused`` says how much was served; exact reuse, so greedy output equals
        plain generate over the same ids. ``prediction=text`` as for :meth:`generate`."""
        return self.engine.complete(prompt, **generate_kwargs)

    def chat(self, message: str, session: str = DEFAULT_SESSION, *, memory_scope: str | None = None,
             persona: str | None = None,
             **generate_kwargs: Any) -> Reply:
        """One turn of a conversation: the session's K/V is carried from turn to turn, so only the
        new message and the template glue are computed (``reply.stats`` says what was).

        The conversation's ids are each turn's own ids (glue + message + generation prompt)
        followed by the reply's generated ids, never re-tokenized. Calls on one session run one
        after the other. Extra keyword arguments go to ``model.generate`` (``max_new_tokens``
        defaults to 64).

        With ``Config.memory_recall`` on, the facts of ``memory_scope`` most similar to the
        message (``pc.memory``, with the threshold and guard of ``memory.recall.select``) are put before
        the message in this turn; ``reply.stats.fact_ids`` names them. ``memory_scope`` chooses
        which facts this turn recalls, not what the session's history holds: earlier turns of
        the session keep their memory blocks ('text' mode) and replies when a later turn passes
        another scope (the 'splice' modes empty the memory region); use one session per scope
        to keep scopes apart (docs/memory.md).

        With ``Config.memory_extraction`` on, the turn is queued for extraction into
        ``memory_scope`` in idle time (best effort: a failed write counts in
        ``reply.stats.store_errors``).

        ``persona`` (a name from :attr:`personas`) runs the turn with that persona's system
        prompt as the session's and its peft adapter applied (the base model for a persona
        without one); the model's adapter state is restored after the turn. The head K/V is
        read from the persona's snapshot for the weights in use instead of being prefilled
        (``reply.stats.persona_head``); a session whose head was another one is computed again.
        Pass ``persona`` at every turn that should run under it.

        :raises UnknownSession: ``session`` was never created (see :attr:`sessions`).
        :raises UnknownPersona: no persona ``persona``.
        :raises MessageTooLong: the message and ``max_new_tokens`` exceed ``session_kv_tokens``
            or the model's context.
        :raises TypeError: ``memory_scope`` is neither a str nor None."""
        check_scope(memory_scope)  # before the turn: it would be queued for extraction with it
        return self.sessions.chat(message, session, memory_scope=memory_scope, persona=persona,
                                  **generate_kwargs)

    @property
    def personas(self) -> Personas:
        """``add(name, system_prompt, adapter=None)`` (a peft LoRA directory), get, list, remove."""
        return self.sessions.personas

    @property
    def turn_log(self) -> TurnLog:
        """Chat turns with context hash, fact ids, output, latency, feedback (memory L3)."""
        return self.sessions.log

    def feedback(self, turn_id: int, *, accepted: bool | None = None, edited_text: str | None = None,
                 session: str = DEFAULT_SESSION) -> TurnRecord:
        """Record the user's verdict on chat turn ``turn_id`` of ``session`` (its latest turn of
        that id): ``accepted`` and/or ``edited_text`` (the reply as it should have been); see
        :meth:`TurnLog.feedback`. Raises UnknownTurn for a turn never logged, ValueError for bad values."""
        return self.sessions.log.feedback(turn_id, session, accepted=accepted, edited_text=edited_text)

    def add_documents(self, docs: Any, *, scope: str | None = None) -> AddReport:
        """Add documents (strings, UTF-8 bytes, mappings with ``text``/``id``/``scope``/``metadata``,
        or :class:`Document`) to the knowledge bank; duplicates are stored once. Stored answers
        that the new chunks would change are marked stale and queued for refresh."""
        return self.assistant.add_documents(docs, scope=scope)

    def ask(self, query: str, *, scope: str | None = None, **generate_kwargs: Any) -> Answer:
        """Answer from the QA bank if a stored question matches, else retrieve and generate."""
        return self.assistant.ask(query, scope=scope, **generate_kwargs)

    def idle(self, budget_s: float | None = None, max_tasks: int | None = None, *,
             progress: bool = False) -> IdleReport:
        """Run deferred work now, in this thread, without waiting for the quiet period:
        predicted questions, their population, abstracts, real answers of QA-bank hits, refresh
        of stale entries, and the scheduler's conversions. Stops when the queue is empty, after
        ``max_tasks``, or once ``budget_s`` is spent: the budget is checked after every decoded
        token, so the call overruns it by at most one decode step (or one prefill); the
        interrupted task stays queued. The report says what ran and what remains
        (``report.summary()``); ``progress=True`` shows a progress bar."""
        return self.assistant.idle(budget_s, max_tasks, progress=progress)

    def correct(self, entry_id: int, answer: str) -> QAEntry:
        """Correct a stored answer: the entry serves ``answer`` from now on, and its stored
        paraphrases (which carried the old answer) are not served until regenerated or
        corrected too (``qa_bank.correct`` changes the one entry only)."""
        return self.assistant.correct(entry_id, answer)

    def predict(self, kind: str = "knowledge", *, scope: str | None = None, rounds: int = 1) -> int:
        """Queue predictions now (no quiet period): ``"knowledge"`` (questions about each chunk
        of ``scope``) or ``"history"`` (from recent questions); returns how many were queued."""
        return self.assistant.predict(kind, scope=scope, rounds=rounds)

    def start_idle_worker(self, *, poll_s: float = 0.2) -> IdleWorker:
        """Run idle work in a background thread; foreground calls preempt it within one decode
        step. Stop it with :meth:`stop_idle_worker` (``close()`` stops it too)."""
        return self.assistant.start_idle_worker(poll_s=poll_s)

    def stop_idle_worker(self) -> IdleReport | None:
        return self.assistant.stop_idle_worker()

    def stats(self) -> StatsTotals:
        """Totals over the requests this handle served, with the QA bank's lookups and hits
        of this session (``qa_bank.stats()`` has its rejections; ``percache store info`` the
        hit counts stored per entry)."""
        totals = dataclasses.replace(self.engine.stats())
        totals.qa_lookups, totals.qa_hits = self.assistant.qa_counters()
        totals.answers_checked = self.assistant.grounding.checked
        totals.answers_flagged = self.assistant.grounding.flagged
        forgets = self.assistant.forget_journal.counts
        totals.forgets_rerun, totals.forgets_rerun_failed = forgets.rerun, forgets.rerun_failed
        # not under the engine's lock: the idle worker may hold it for a whole task
        totals.draft_cost_curve = self.engine.drafts.curve(self.engine.fingerprint, self.config)[1]
        totals.draft_curves_ignored = self.engine.drafts.curves.ignored
        for name, value in self.engine.drafts.calibration_totals().items():
            setattr(totals, f"calibration_{name}", value)
        return totals

    # -- settings and life cycle -----------------------------------------------------------
    def measure_verify_cost(self, *, cached_tokens: int = MEASURE_DEFAULTS["cached_tokens"],
                            max_k: int = MEASURE_DEFAULTS["max_k"], repeats: int = MEASURE_DEFAULTS["repeats"],
                            progress: bool = True) -> tuple[float, ...]:
        """Measure what a forward verifying ``k = 1 .. max_k`` draft tokens costs on this
        machine, in one-token forwards, set it as ``Config.draft_verify_cost`` and return it.

        The forwards run as drafted decoding runs them: this handle's attention, over the packed
        linear weights for ``k >= 1`` where ``Config.draft_packed_linears`` is on (packed now if
        they were not), keeping ``k + 1`` logits, over a cache of ``cached_tokens`` random token
        ids that is built for the measuring and dropped after it (the store and sessions are not
        touched). Each ``k`` is the median of ``repeats`` interleaved rounds
        (:mod:`~percache_plugin.decode.calibrate`); ratios measured below 1.0 (noise: a verify
        forward never costs less than a one-token one) are clipped to 1.0. Measure at the load
        and thread count decoding will run with. ``progress`` shows a progress bar after 2 s.
        The curve is also stored for this model and machine
        (:mod:`~percache_plugin.decode.stored_cost`): a later handle on the store with
        ``draft_verify_cost=None`` prices drafts by it.

        :raises ValueError: an argument is not a positive int, or the cache and drafts exceed
            the model's context (the message names it).
        """
        with self.engine.preemption.foreground(self.engine.lock):
            if self.engine.closed:
                raise RuntimeError("this percache handle was closed; call enable() again")
            drafts = self.engine.drafts
            curve = drafts.measure(self.engine.follow_model(), self.config, self.engine.stats(),
                                   cached_tokens=cached_tokens, max_k=max_k, repeats=repeats,
                                   progress=progress)
            drafts.measured_now = curve
            self.configure(draft_verify_cost=curve)
        return curve

    def configure(self, **changes: Any) -> Config:
        """Change settings at run time, validated like :func:`enable`'s keywords. Every field
        takes effect from the next call (a new ``kv_byte_limit`` or ``qa_byte_limit`` evicts at
        once; ``storage_dtype`` and ``verify_checksums`` apply to the next writes and reads;
        ``chunk_words`` to documents added from now on). A change that cannot apply raises
        :class:`ConfigError` and changes nothing: ``embedder`` once the banks hold vectors of
        another one, ``chat_template=True`` for a tokenizer without a template. Atomic: when
        applying a change fails, the settings stay as they were."""
        with self.engine.lock:
            old = self.config
            new = old.replace(**changes)
            changed = {k for k in changes if getattr(new, k) != getattr(old, k)}
            self.engine.check(new, changed)
            self.assistant.check(new, changed)
            try:
                self.engine.configure(new, changed)
                self.assistant.configure(old, changed)
                self.sessions.layout.follow(self.engine.ctx.use_template)
            except BaseException:
                self.engine.configure(old, changed)
                self.sessions.layout.follow(self.engine.ctx.use_template)
                raise
            if self.config.debug_log:
                ensure_handler()
            return self.config

    def close(self) -> None:
        """End the handle: stop the idle worker, restore the model's own attention, close the
        store and the banks. Requests on a closed handle raise; ``enable()`` again for a new one.
        (:meth:`disabled` is the reversible switch.)"""
        self.assistant.stop_idle_worker()
        with self.engine.lock:
            if not self.engine.closed:
                self.assistant.close()
                self.sessions.close()
            self.engine.close()

    def disable(self) -> None:
        """The same as :meth:`close` (kept for code written against 0.1)."""
        self.close()

    @contextlib.contextmanager
    def disabled(self) -> Iterator[PerCache]:
        """Run the model without the plugin inside the block; ``pc.generate`` then computes
        every token and neither reads nor writes the store (a same-tokenization baseline)."""
        with self.engine.disabled():
            yield self

    def __enter__(self) -> PerCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PerCache({self.capabilities.summary()}, store={self.store.path or 'memory'})"


def enable(model: Any, tokenizer: Any, store: str | Path | None = None, config: Config | None = None,
           *, plugins: Sequence[object] = (), **overrides: Any) -> PerCache:
    """Switch ``model`` to percache and return its handle.

    :param model: a loaded transformers causal LM.
    :param tokenizer: its tokenizer.
    :param store: None for an in-memory store, or a directory for a persistent one.
    :param config: a :class:`Config` (None: the defaults).
    :param plugins: plugins to register before the handle is built (needed for hooks consulted
        once at enable time, such as ``percache_model_profile``); others can be registered later
        with ``pc.plugins.register``.
    :param overrides: :class:`Config` fields as keyword arguments, applied over ``config``
        (unknown keys raise ``ConfigError``).
    """
    if config is not None and not isinstance(config, Config):
        raise TypeError(f"config must be a percache_plugin.Config or None, got {type(config).__name__}")
    base = config if config is not None else Config()
    return PerCache(model, tokenizer, store, base.replace(**overrides) if overrides else base, plugins)
