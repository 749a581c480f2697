"""The K/V engine: owns the model switch, the K/V store and the plugins; runs requests."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pluggy

from ..attention.backend import check_free
from ..attention.capability import capabilities_of, usable_shifter
from ..attention.kinds import check_reusable
from ..attention.profile import text_config
from ..attention.rope import NotShiftable, RopeShifter
from ..attention.rope_verify import verified_shifter
from ..attention.splice import SpliceCache
from ..config import Config, ConfigError, check_store_path
from ..core.capabilities import Capabilities
from ..core.preemption import Preempted, Preemption
from ..decode import AcceptanceHistory, DraftedDecoding, DraftHints, run_generate
from ..decode.chunked import StopCheck, interrupt_check, prefill_rest
from ..decode.seeded import seeded
from ..decode.sources import with_prediction
from ..decode.stored_cost import CurveLookup
from ..fingerprint import ModelFingerprint
from ..hooks.blame import register_named
from ..hooks.contexts import EngineContext
from ..hooks.manager import Hooks, make_plugin_manager
from ..hooks.registries import Registries
from ..kv.blocks import block_prompt, plain_ids
from ..kv.cache import empty_cache
from ..kv.store import DB_NAME
from ..kv.stores import FingerprintStores
from ..request import (
    Finish,
    Prefilled,
    check_length,
    open_request,
    recompute_on_corrupt,
)
from ..reuse import ReuseRunner
from ..segments import Prompt, Segment, normalize_segments, scoped
from ..stats import Generation, GenerationStats, StatsTotals
from .drafting import DraftSetup
from .switch import ModelSwitch

__all__ = ["Engine"]

class Engine:
    """K/V reuse on one model: tokenize segments, plan, load, splice, generate, store.

    :param preemption: shared with the idle worker; background calls stop when a foreground
        call waits.
    """

    def __init__(self, model: Any, tokenizer: Any, store: str | Path | None, config: Config,
                 plugins: Sequence[object] = (), *, preemption: Preemption | None = None) -> None:
        if not hasattr(model, "generate") or not hasattr(model, "config"):
            raise TypeError(f"model must be a transformers PreTrainedModel, got {type(model).__name__}")
        if not callable(tokenizer):
            raise TypeError(f"tokenizer must be a transformers tokenizer, got {type(tokenizer).__name__}")
        check_reusable(model)  # recurrent and hybrid models: refused, with the reason
        check_free(model)  # one open handle per model
        self._path = check_store_path(store)  # before the weights are hashed
        self.model = model
        self.tokenizer = tokenizer
        self.lock = threading.RLock()
        self.preemption = preemption or Preemption()
        self._totals = StatsTotals()
        self.drafts = DraftSetup(model, CurveLookup(None if self._path is None else self._path / DB_NAME))
        self.plugins: pluggy.PluginManager = make_plugin_manager()
        for plugin in plugins:  # before anything asks the hooks (the model profile, below)
            register_named(self.plugins, plugin)
        self.hooks = Hooks(self.plugins)
        self.tracker = ModelFingerprint(model, tokenizer)
        self.fingerprint = self.tracker.value
        self.registries = Registries.fill(self.hooks)
        self.registries.check(config)
        self.stores = FingerprintStores(self._path, self.registries.eviction_policies)
        self.store = self.stores.get(self.fingerprint, config)
        use_template = self._template_choice(config)
        self.n_parameters = sum(p.numel() for p in model.parameters())
        rope = self._rope()  # before install: a guessed RoPE layout is probed with a forward
        self._switch = ModelSwitch(model, self.hooks,  # an unknown family: verified on a forward
                                   verify=text_config(model).model_type not in self.registries.model_profiles)
        self._closed = False
        self.shifter, shift_reason = usable_shifter(self._switch.installed, rope)
        self.ctx = EngineContext(config, self.store, capabilities_of(model, self._switch.installed, self.shifter, shift_reason), self.hooks,
                                 self.fingerprint, tokenizer, use_template,
                                 self.registries.recompute_strategies, self.registries.buffer_policies,
                                 generation_config=lambda: getattr(self.model, "generation_config", None),
                                 every_store=lambda: self.stores.every(self.fingerprint, self.config))
        self._reuse = ReuseRunner(model, self.ctx, self.shifter)
        self._switch.attach(self.ctx, self._reuse)

    @property
    def config(self) -> Config:
        return self.ctx.config

    # -- the fingerprint follows the model ------------------------------------------------
    def follow_model(self) -> str:
        """Check, cheaply, whether the weights in use changed (adapter enabled, disabled,
        switched, added or merged; a weight edited in place) and key the store by the
        fingerprint of the weights now in use; called at the start of every request."""
        with self.lock:
            return self._rekey(self.tracker.current())

    def refresh_fingerprint(self) -> str:
        """Hash every weight again and key the store by the result."""
        with self.lock:
            return self._rekey(self.tracker.rehash())

    def _rekey(self, fingerprint: str) -> str:
        if fingerprint != self.fingerprint:
            self.fingerprint = self.ctx.fingerprint = fingerprint
            self.store = self.ctx.store = self.stores.get(fingerprint, self.config)
        return fingerprint

    @property
    def capabilities(self) -> Capabilities:
        return self.ctx.capabilities

    # -- model switch -------------------------------------------------------------------
    def _rope(self) -> tuple[RopeShifter | None, str]:
        try:
            return verified_shifter(self.model, self.hooks.model_profile(self.model),
                                    table=self.registries.model_profiles), ""
        except NotShiftable as exc:
            return None, exc.reason

    def _template_choice(self, config: Config) -> bool:
        has = bool(getattr(self.tokenizer, "chat_template", None))
        if config.chat_template is True and not has:
            raise ConfigError("chat_template=True but the tokenizer has no chat template")
        return has if config.chat_template is None else bool(config.chat_template)

    @property
    def enabled(self) -> bool:
        return self._switch.enabled

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Restore the model's own attention and close the store; requests then fail."""
        with self.lock:
            if not self._closed:
                self._closed = True
                self._switch.remove()
                self.stores.close()
                self.drafts.release()

    @contextlib.contextmanager
    def disabled(self) -> Iterator[None]:
        """The model without the plugin inside the block (computes every token, no store)."""
        with self.lock:
            if self._closed:
                raise RuntimeError("this percache handle was closed; call enable() again")
            with self._switch.lifted():
                yield

    def check(self, config: Config, changed: set[str]) -> None:
        """Raise :class:`ConfigError` if ``config`` cannot apply to this engine."""
        if "chat_template" in changed:
            self._template_choice(config)
        self.registries.check(config, changed)

    def configure(self, config: Config, changed: set[str]) -> None:
        """Apply new settings (checked with :meth:`check`); a new K/V byte limit evicts at once,
        a new storage dtype or checksum setting applies to the next writes and reads."""
        if "chat_template" in changed:
            self.ctx.use_template = self._template_choice(config)
        self.stores.configure(config, changed)
        self.ctx.config = config

    # -- requests -----------------------------------------------------------------------
    def prompt(self, segments: Sequence[str | Segment], scope: str | None = None) -> Prompt:
        """Tokenize segments the way :meth:`generate` does (the ``percache_build_prompt`` hook;
        by default each segment on its own); ``scope``: keys chained from the scope's root
        (:func:`~percache_plugin.segments.scoped`)."""
        return scoped(self.hooks.build_prompt(self.ctx, normalize_segments(segments)), self.fingerprint, scope)

    def generate(self, segments: Sequence[str | Segment] | Prompt, *, drafts: DraftHints | None = None,
                 prediction: str | None = None, seed: int | None = None, exact_only: bool = False,
                 scope: str | None = None, **generate_kwargs: Any) -> Generation:
        """Generate from ``[system, chunk, ..., query]`` (or a :class:`Prompt` already built,
        e.g. by :func:`~percache_plugin.kv.blocks.block_prompt`) reusing stored chunk K/V.

        Extra keyword arguments go to ``model.generate`` (``max_new_tokens`` defaults to 64).
        Greedy decoding verifies drafts (``Config.drafting``) from the ``percache_draft_sources``
        hook, which receives ``drafts`` (texts or token ids to draft from, by source name).
        ``prediction``: text the answer is expected to repeat much of (OpenAI's predicted
        outputs), drafted from as source ``"prediction"``; verified like every draft, so the
        tokens are those without it. Sampling ignores it. ``stats.accepted_by_source`` /
        ``drafted_by_source`` say how much of it was kept. ``seed``: sampling repeats for the
        same seed whatever ran before, and leaves the process's random state as it was
        (:func:`~percache_plugin.decode.seeded.seeded`, under the model's lock). ``exact_only``:
        no shifted reuse for this request (``Config.reuse="shifted"`` finds a piece's tokens in
        any stored node of the prompt's scope, approximately; the server's chat requests reuse exactly).
        ``scope``: the prompt's keys start from the scope's root, so it reuses only K/V that
        requests of the same scope stored, shifted reuse included (``pc.ask(scope=...)``).
        """
        drafts = with_prediction(drafts, prediction)
        with self.preemption.foreground(self.lock), seeded(seed):
            t0 = time.perf_counter()
            generate_kwargs.setdefault("max_new_tokens", 64)
            return recompute_on_corrupt(
                lambda n: self._generate(segments, drafts, generate_kwargs, t0, n, exact_only, scope),
                generate_kwargs)

    def _generate(self, segments: Sequence[str | Segment] | Prompt, drafts: DraftHints | None, generate_kwargs: dict[str, Any], t0: float, aborted: int, exact_only: bool = False,
                  scope: str | None = None) -> Generation:
        stop = interrupt_check(self.preemption)
        prompt, cache, served, stats, finish = self._prepare(segments, int(generate_kwargs["max_new_tokens"]), t0, stop,
                                                             aborted, exact_only, scope)
        gen = None
        try:  # a background request computes the prompt here, in chunks, checked between them
            ready = prefill_rest(self.model, prompt, cache, stats, self.config.background_prefill_chunk, stop) if stop else served
            preempt = self.preemption.flag if self.preemption.in_background() else None
            drafting = self.drafting(prompt, generate_kwargs, drafts, stats)
            gen = run_generate(self.model, self.tokenizer, prompt, cache, ready, stats, generate_kwargs, t0, preempt, self.preemption.deadline, drafting)
            stats.tokens_computed = prompt.n_tokens - served
        finally:
            finish(cache, gen, gen is not None)
        if gen.stats.fallback == "preempted":
            raise Preempted("background generation yielded to a foreground request")
        return gen

    @property
    def draft_history(self) -> AcceptanceHistory:
        """How drafts of each kind fared across this handle's answers."""
        return self.drafts.history

    @draft_history.setter
    def draft_history(self, history: AcceptanceHistory) -> None:
        self.drafts.history = history

    def drafting(self, prompt: Prompt, kwargs: dict[str, Any], hints: DraftHints | None,
                 stats: GenerationStats) -> DraftedDecoding | None:
        """The drafted decoding loop for a request decoding ``prompt`` with ``kwargs`` (hand it to
        :func:`~percache_plugin.decode.run_generate`), or None (``stats.drafting`` says why).
        Raises where a plugin's extra mask cannot apply to the model (``ModelSwitch.check_masks``)."""
        self._switch.check_masks()  # every generate() and chat turn comes here
        return self.drafts.for_request(self.ctx, self.hooks, prompt, kwargs, hints, stats,
                                        enabled=self.enabled, mask_function=self._switch.mask_function)

    def idle_attention_plugins(self) -> list[str]:
        """Plugins implementing ``percache_attention`` that this model never calls (its attention
        does not go through percache); [] where it does."""
        return self._switch.idle_attention_plugins()

    def pack_linears(self) -> int:
        """Pack drafting's linear weights now (else at its first verify after a first token): their bytes, or 0."""
        return self.drafts.pack(self.config.drafting and self.config.draft_packed_linears)

    def complete(self, prompt: str | Sequence[int], **generate_kwargs: Any) -> Generation:
        """Generate from a plain prompt (text, tokenized with the tokenizer's special tokens and
        no chat template; or token ids), reusing the longest stored run of its
        ``Config.prefix_block_tokens``-token blocks that any earlier plain prompt computed."""
        ids = plain_ids(self.tokenizer, prompt)
        # the keys chain the fingerprint of the weights in use: read in the hold that generates,
        # so weights changed in between cannot key blocks by weights that did not compute them
        with self.preemption.foreground(self.lock):
            if self.enabled:
                self.follow_model()
            blocks = self.hooks.plain_prompt(self.ctx, ids) if self.enabled \
                else block_prompt(ids, self.config.prefix_block_tokens, self.fingerprint)
            return self.generate(blocks, **generate_kwargs)

    def prefill(self, segments: Sequence[str | Segment] | Prompt, *, exact_only: bool = False,
                scope: str | None = None) -> Prefilled:
        """Run only the reuse path: a cache holding every prompt position but the last.

        Feed ``prompt.input_ids[-1:]`` (plus any continuation) to the model with ``past_key_values=result.cache``
        to get next-token distributions, e.g. for teacher-forced quality checks of approximate reuse. What
        was computed is stored. ``exact_only``: no shifted reuse (what it computes is exact, in the tree).
        ``scope``: keys of the scope's chain, as :meth:`generate` (idle work for a scope's asks)."""
        with self.preemption.foreground(self.lock):
            t0 = time.perf_counter()
            return recompute_on_corrupt(lambda aborted: self._prefill(segments, t0, aborted, exact_only, scope))

    def _prefill(self, segments: Sequence[str | Segment] | Prompt, t0: float, aborted: int, exact_only: bool = False,
                 scope: str | None = None) -> Prefilled:
        stop = interrupt_check(self.preemption)
        prompt, cache, served, stats, finish = self._prepare(segments, 1, t0, stop, aborted, exact_only, scope)
        done = False
        try:
            prefill_rest(self.model, prompt, cache, stats, self.config.background_prefill_chunk, stop)
            stats.tokens_computed = prompt.n_tokens - 1 - served
            done = True
        finally:
            finish(cache, None, done)
        return Prefilled(prompt, cache, stats)

    def _prepare(self, segments: Sequence[str | Segment] | Prompt, max_new: int, t0: float,
                 stop: StopCheck | None = None, aborted: int = 0, exact_only: bool = False,
                 scope: str | None = None) -> tuple[Prompt, Any, int, GenerationStats, Finish]:
        """The prompt, its cache, the prompt positions it serves, the stats and a ``finish(cache,
        generation, completed)`` (:func:`~percache_plugin.request.open_request`; ``stop``, ``aborted``,
        ``exact_only``: ditto; ``scope``: a prompt built from segments is keyed in its chain)."""
        if self._closed:
            raise RuntimeError("this percache handle was closed; call enable() again")
        if self.enabled:
            self.follow_model()
        # keyed after follow_model: by the fingerprint of the weights that compute it
        prompt = segments if isinstance(segments, Prompt) else self.prompt(segments, scope)
        check_length(self.model, prompt, max_new)
        if not self.enabled:
            return (prompt, empty_cache(), 0, GenerationStats(prompt_tokens=prompt.n_tokens),
                    lambda cache, gen, completed: None)
        req = open_request(self.ctx, self._reuse, prompt, t0, self._totals, lambda: self.enabled,
                           chunk=self.config.background_prefill_chunk, stop=stop, aborted=aborted, exact_only=exact_only)
        return prompt, req.cache, req.served, req.stats, req.finish

    # -- storing ------------------------------------------------------------------------
    @property
    def active_splice(self) -> SpliceCache | None:
        """The splice cache of the forward in progress, if any."""
        return self._reuse.active_splice

    def kv_cached(self, segments: Sequence[str | Segment], scope: str | None = None) -> bool:
        """Whether every reusable piece of this prompt (keyed in ``scope``'s chain) is in the
        store as an exact prefix."""
        with self.lock:
            self.follow_model()
            return all(p.key is not None and self.store.contains(p.key)
                       for p in self.prompt(segments, scope).reusable)

    def stats(self) -> StatsTotals:
        """Totals over the requests this engine served."""
        return self._totals
