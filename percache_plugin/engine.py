"""The PerCache handle: owns the model switch, the store and the plugins; runs requests."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pluggy
import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    StoppingCriteria,
    StoppingCriteriaList,
)

from .assistant import AssistantMixin
from .attention.backend import AttentionSwitch, install, uninstall
from .attention.rope import NotShiftable, RopeShifter
from .attention.splice import SpliceCache
from .config import Config, ConfigError
from .fingerprint import model_fingerprint
from .hooks.manager import Hooks, make_plugin_manager
from .idle import IdleQueue
from .kv.cache import empty_cache, slice_chunk
from .kv.store import KVStore
from .predict.state import PredictionState
from .rag.embeddings import Embedder
from .rag.knowledge import KnowledgeBank
from .rag.qa_bank import QABank
from .reuse import PlanError, ReuseRunner
from .scheduler import (
    BackgroundStats,
    Preempted,
    queue_conversions,
)
from .segments import Prompt, Segment, build_prompt, node_key, normalize_segments
from .stats import Generation, GenerationStats, StatsTotals
from .worker import IdleWorker

__all__ = ["PerCache", "Capabilities", "Prefilled", "enable"]

log = logging.getLogger("percache")


@dataclass(frozen=True)
class Capabilities:
    """What percache can do on this model, and why not where it cannot.

    :ivar attention_hook: attention runs through the ``percache_attention`` hook.
    :ivar attention_backend: ``"sdpa"`` or ``"eager"`` (the default hook implementation).
    :ivar exact_reuse: exact-prefix K/V reuse (through a plain cache, so on every family).
    :ivar shifted_reuse: chunk reuse at new positions (RoPE phase shift).
    :ivar reasons: why a capability is off, keyed by its name.
    """

    model_type: str
    attention_hook: bool
    attention_backend: str
    exact_reuse: bool
    shifted_reuse: bool
    reasons: dict[str, str]

    def summary(self) -> str:
        parts = [f"model_type={self.model_type}", f"attention_hook={self.attention_hook}",
                 f"backend={self.attention_backend}", f"exact_reuse={self.exact_reuse}",
                 f"shifted_reuse={self.shifted_reuse}"]
        parts += [f"{k}: {v}" for k, v in self.reasons.items()]
        return "; ".join(parts)


@dataclass
class Prefilled:
    """The result of :meth:`PerCache.prefill`: the prompt, a cache over all positions but the
    last, and the request's stats."""

    prompt: Prompt
    cache: Any
    stats: GenerationStats


class _PreemptCheck(StoppingCriteria):
    """Stops a background generation after the current token when a foreground call waits."""

    def __init__(self, flag: threading.Event) -> None:
        self.flag = flag
        self.fired = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        self.fired = self.fired or self.flag.is_set()
        return torch.full((input_ids.shape[0],), self.fired, dtype=torch.bool, device=input_ids.device)


class _FirstTokenClock(LogitsProcessor):
    """Records when the first next-token distribution is ready (time to first token)."""

    def __init__(self) -> None:
        self.t: float | None = None

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.t is None:
            self.t = time.perf_counter()
        return scores


def _context_limit(model: Any) -> int | None:
    cfg = model.config.get_text_config(decoder=True)
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(cfg, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class PerCache(AssistantMixin):
    """A handle on one enabled model. Create it with :func:`enable`."""

    def __init__(self, model: Any, tokenizer: Any, store: str | Path | None, config: Config,
                 plugins: Sequence[object] = ()) -> None:
        if not hasattr(model, "generate") or not hasattr(model, "config"):
            raise TypeError(f"model must be a transformers PreTrainedModel, got {type(model).__name__}")
        if not callable(tokenizer):
            raise TypeError(f"tokenizer must be a transformers tokenizer, got {type(tokenizer).__name__}")
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self._lock = threading.RLock()
        self._preempt = threading.Event()
        self._fg_count = 0
        self._fg_mutex = threading.Lock()
        self._worker: IdleWorker | None = None
        self.background_stats = BackgroundStats()
        self._totals = StatsTotals()
        self.plugins: pluggy.PluginManager = make_plugin_manager()
        for plugin in plugins:  # before anything asks the hooks (the model profile, below)
            self.plugins.register(plugin)
        self.hooks = Hooks(self.plugins)
        self.fingerprint = model_fingerprint(model, tokenizer)
        path = None if store is None else Path(store).expanduser()
        self.store = KVStore(
            path, fingerprint=self.fingerprint, byte_limit=config.kv_byte_limit,
            storage_dtype=config.torch_storage_dtype, verify=config.verify_checksums,
        )
        self._use_template = self._template_choice()
        self._embedder: Embedder | None = None
        self._knowledge: KnowledgeBank | None = None
        self._qa_bank: QABank | None = None
        self._idle_queue: IdleQueue | None = None
        self._prediction_state: PredictionState | None = None
        self.n_parameters = sum(p.numel() for p in model.parameters())
        self._reuse = ReuseRunner(self)
        self._switch: AttentionSwitch = install(model, self._relay)
        self._enabled = True
        self._closed = False
        self.shifter, shift_reason = self._shifter()
        self.capabilities = self._capabilities(shift_reason)

    # -- model switch -------------------------------------------------------------------
    def _relay(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
               value: torch.Tensor, attention_mask: torch.Tensor | None,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        mask = self._reuse.splice_mask(query, key, kwargs)
        if mask is not None:
            attention_mask = mask
        return self.hooks.attention(self, module, query, key, value, attention_mask, kwargs)

    def _shifter(self) -> tuple[RopeShifter | None, str]:
        if not self._switch.active:
            return None, "needs the attention hook (splice masks): " + self._switch.reason
        try:
            return RopeShifter.from_model(self.model, self.hooks.model_profile(self.model)), ""
        except NotShiftable as exc:
            return None, exc.reason

    def _capabilities(self, shift_reason: str) -> Capabilities:
        reasons: dict[str, str] = {}
        if not self._switch.active:
            reasons["attention_hook"] = self._switch.reason
        if shift_reason:
            reasons["shifted_reuse"] = shift_reason
        return Capabilities(
            model_type=str(getattr(self.model.config, "model_type", "unknown")),
            attention_hook=self._switch.active,
            attention_backend=self._switch.backend,
            exact_reuse=True,
            shifted_reuse=self.shifter is not None,
            reasons=reasons,
        )

    def _template_choice(self) -> bool:
        has = bool(getattr(self.tokenizer, "chat_template", None))
        if self.config.chat_template is True and not has:
            raise ConfigError("chat_template=True but the tokenizer has no chat template")
        return has if self.config.chat_template is None else bool(self.config.chat_template)

    @property
    def enabled(self) -> bool:
        return self._enabled

    def disable(self) -> None:
        """Restore the model's own attention; the handle can no longer serve requests."""
        self.stop_idle_worker()
        with self._lock:
            if self._enabled:
                uninstall(self.model, self._switch)
                self._enabled = False
            if not self._closed:
                self._closed = True
                for part in (self._qa_bank, self._idle_queue, self._prediction_state):
                    if part is not None:
                        part.close()
                self.store.close()

    @contextlib.contextmanager
    def disabled(self) -> Iterator[PerCache]:
        """Run the model without the plugin inside the block; ``pc.generate`` then computes
        every token and neither reads nor writes the store (a same-tokenization baseline)."""
        with self._lock:
            if not self._enabled or self._closed:
                raise RuntimeError("handle is already disabled")
            uninstall(self.model, self._switch)
            self._enabled = False
            try:
                yield self
            finally:
                if self._switch.active:
                    self.model.set_attn_implementation(self._switch.name)
                self._enabled = True

    def close(self) -> None:
        self.disable()

    def __enter__(self) -> PerCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests -----------------------------------------------------------------------
    def prompt(self, segments: Sequence[str | Segment]) -> Prompt:
        """Tokenize segments the way :meth:`generate` does (each on its own)."""
        return build_prompt(
            normalize_segments(segments), self.tokenizer, fingerprint=self.fingerprint,
            use_template=self._use_template, separator=self.config.chunk_separator,
        )

    def _check_length(self, prompt: Prompt, max_new: int) -> None:
        limit = _context_limit(self.model)
        if limit is not None and prompt.n_tokens + max_new > limit:
            raise ValueError(
                f"prompt of {prompt.n_tokens} tokens plus max_new_tokens={max_new} exceeds the "
                f"model's context of {limit} tokens"
            )

    def generate(self, segments: Sequence[str | Segment], **generate_kwargs: Any) -> Generation:
        """Generate from ``[system, chunk, ..., query]`` reusing stored chunk K/V.

        Extra keyword arguments go to ``model.generate`` (``max_new_tokens`` defaults to 64).
        """
        with self._foreground():
            t0 = time.perf_counter()
            generate_kwargs.setdefault("max_new_tokens", 64)
            prompt, cache, served, stats, finish = self._prepare(
                segments, int(generate_kwargs["max_new_tokens"]), t0)
            gen = self._run(prompt, cache, served, stats, generate_kwargs, t0)
            finish(cache)
            if self._enabled:
                self.hooks.request_end(self, prompt, gen)
            if gen.stats.fallback == "preempted":
                raise Preempted("background generation yielded to a foreground request")
            return gen

    def prefill(self, segments: Sequence[str | Segment]) -> Prefilled:
        """Run only the reuse path: a cache holding every prompt position but the last.

        Feed ``prompt.input_ids[-1:]`` (plus any continuation) to the model with
        ``past_key_values=result.cache`` to get next-token distributions, e.g. for
        teacher-forced quality checks of approximate reuse. What was computed is stored."""
        with self._foreground():
            t0 = time.perf_counter()
            prompt, cache, served, stats, finish = self._prepare(segments, 1, t0)
            have = cache.get_seq_length()  # a splice already filled every position but the last
            rest = torch.tensor([prompt.input_ids[have:-1]], device=self._dtype_device()[1])
            if rest.numel():
                with torch.inference_mode():
                    self.model(input_ids=rest, past_key_values=cache, use_cache=True)
            stats.tokens_computed = prompt.n_tokens - 1 - served
            finish(cache)
            stats.total_s = time.perf_counter() - t0
            return Prefilled(prompt, cache, stats)

    def _prepare(self, segments: Sequence[str | Segment], max_new: int, t0: float) -> tuple[
            Prompt, Any, int, GenerationStats, Any]:
        """Plan, load and splice: the cache, how many prompt positions it serves, and a
        ``finish(cache)`` that stores what was computed and accounts the request."""
        if self._closed:
            raise RuntimeError("this percache handle was disabled; call enable() again")
        prompt = self.prompt(segments)
        self._check_length(prompt, max_new)
        stats = GenerationStats(prompt_tokens=prompt.n_tokens)
        if not self._enabled:
            return prompt, empty_cache(), 0, stats, lambda cache: None
        self.hooks.request_start(self, prompt)
        plan = self.hooks.plan_reuse(self, prompt)
        exact = self._reuse.load_exact(prompt, plan, stats)
        shifted = self._reuse.load_shifted(prompt, plan, stats)
        stats.load_s = time.perf_counter() - t0
        if shifted:
            try:
                cache, served, exact_end = self._reuse.splice(prompt, exact, shifted, plan, stats)
            except PlanError as exc:
                log.warning("percache: falling back to a full prefill: %s", exc)
                stats = GenerationStats(prompt_tokens=prompt.n_tokens, fallback=str(exc))
                cache, served, exact_end = empty_cache(), 0, 0
        else:
            cache, served, exact_end = self._reuse.exact_cache(prompt, exact, stats)
        skip = {sp.index for sp in plan.shifted}

        def finish(cache: Any) -> None:
            self._store_computed(prompt, exact_end, skip, bool(shifted) and stats.approximate,
                                 cache, stats)
            stats.total_s = time.perf_counter() - t0
            self._totals.add(stats)

        return prompt, cache, served, stats, finish

    def configure(self, **changes: Any) -> Config:
        """Change settings at run time (validated like :func:`enable`'s keywords); a new
        ``kv_byte_limit`` applies at once (evicting if needed)."""
        with self._lock:
            old, self.config = self.config, self.config.replace(**changes)
            if "kv_byte_limit" in changes:
                self.store.set_byte_limit(self.config.kv_byte_limit)
            if "qa_byte_limit" in changes and self._qa_bank is not None:
                self._qa_bank.set_byte_limit(self.config.qa_byte_limit)
            if {"similarity_threshold", "population_cutoff", "kv_byte_limit"} & set(changes):
                queue_conversions(self, old, self.config)
            return self.config

    # -- planning and loading ---------------------------------------------------------------
    def _dtype_device(self) -> tuple[torch.dtype, torch.device]:
        p = next(self.model.parameters())
        return p.dtype, p.device

    @property
    def active_splice(self) -> SpliceCache | None:
        """The splice cache of the forward in progress, if any."""
        return self._reuse.active_splice

    # -- running and storing ----------------------------------------------------------------
    def _run(self, prompt: Prompt, cache: Any, served: int, stats: GenerationStats,
             kwargs: dict[str, Any], t0: float) -> Generation:
        device = self._dtype_device()[1]
        stats.tokens_computed = prompt.n_tokens - served
        ids = torch.tensor([prompt.input_ids], device=device)
        clock = _FirstTokenClock()
        processors = LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        processors.append(clock)
        criteria = StoppingCriteriaList(kwargs.pop("stopping_criteria", None) or [])
        preempt = _PreemptCheck(self._preempt) if self._in_background() else None
        if preempt is not None:
            criteria.append(preempt)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        with torch.inference_mode():
            out = self.model.generate(
                ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                logits_processor=processors, stopping_criteria=criteria, return_dict_in_generate=True,
                output_logits=True, pad_token_id=pad, **kwargs,
            )
        new = out.sequences[0, prompt.n_tokens:].tolist()
        stats.new_tokens = len(new)
        if preempt is not None and preempt.fired:
            stats.fallback = "preempted"
        stats.ttft_s = (clock.t or time.perf_counter()) - t0
        stats.total_s = time.perf_counter() - t0
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        first = out.logits[0][0].detach().float().cpu() if out.logits else None
        return Generation(text, new, prompt.input_ids, stats, first)

    def _store_computed(self, prompt: Prompt, served: int, skip: set[int], approximate: bool,
                        cache: Any, stats: GenerationStats) -> None:
        """Store every reusable piece this request computed (also after a partial hit).

        After approximate (shifted) reuse, pieces before the first shifted one saw only exact K/V
        and join the tree as usual; later pieces were computed against approximate K/V: those
        that were served (``skip``) are not stored again, and new ones are stored outside the
        tree, where only shifted reuse finds them."""
        if not self._enabled:
            return
        first_approx = min(skip) if approximate and skip else len(prompt.pieces)
        parent = prompt.pieces[served - 1].key if served else None
        for i, piece in enumerate(prompt.pieces[served:], start=served):
            if piece.key is None:
                break
            if i in skip and i >= first_approx:
                continue
            exact = i < first_approx
            kv = slice_chunk(cache, piece.start, piece.end)
            key = piece.key if exact else node_key(self.fingerprint, "approx", piece.token_ids)
            before = self.store.total_bytes()
            self.hooks.store_chunk(self, key, piece, parent if exact else None, kv, exact)
            stats.nodes_stored += 1
            stats.bytes_stored += max(0, self.store.total_bytes() - before)
            parent = piece.key

    def stats(self) -> StatsTotals:
        """Totals over the requests this handle served."""
        return self._totals

    def __repr__(self) -> str:
        return f"PerCache({self.capabilities.summary()}, store={self.store.path or 'memory'})"


def enable(model: Any, tokenizer: Any, store: str | Path | None = None, *,
           plugins: Sequence[object] = (), **config: Any) -> PerCache:
    """Switch ``model`` to percache and return its handle.

    :param model: a loaded transformers causal LM.
    :param tokenizer: its tokenizer.
    :param store: None for an in-memory store, or a directory for a persistent one.
    :param plugins: plugins to register before the handle is built (needed for hooks consulted
        once at enable time, such as ``percache_model_profile``); others can be registered later
        with ``pc.plugins.register``.
    :param config: :class:`Config` fields as keyword arguments (unknown keys raise ``ConfigError``).
    """
    return PerCache(model, tokenizer, store, Config.from_kwargs(**config), plugins)
