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
from transformers import LogitsProcessor, LogitsProcessorList

from .attention.backend import AttentionSwitch, install, uninstall
from .config import Config, ConfigError
from .fingerprint import model_fingerprint
from .hooks.manager import Hooks, make_plugin_manager
from .kv.cache import cache_from_chunks, empty_cache, slice_chunk
from .kv.store import ChunkKV, KVStore
from .segments import Prompt, Segment, build_prompt, normalize_segments
from .stats import Generation, GenerationStats, StatsTotals

__all__ = ["PerCache", "Capabilities", "enable"]

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


class PerCache:
    """A handle on one enabled model. Create it with :func:`enable`."""

    def __init__(self, model: Any, tokenizer: Any, store: str | Path | None, config: Config) -> None:
        if not hasattr(model, "generate") or not hasattr(model, "config"):
            raise TypeError(f"model must be a transformers PreTrainedModel, got {type(model).__name__}")
        if not callable(tokenizer):
            raise TypeError(f"tokenizer must be a transformers tokenizer, got {type(tokenizer).__name__}")
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self._lock = threading.RLock()
        self._totals = StatsTotals()
        self.plugins: pluggy.PluginManager = make_plugin_manager()
        self.hooks = Hooks(self.plugins)
        self.fingerprint = model_fingerprint(model, tokenizer)
        path = None if store is None else Path(store).expanduser()
        self.store = KVStore(
            path, fingerprint=self.fingerprint, byte_limit=config.kv_byte_limit,
            storage_dtype=config.torch_storage_dtype, verify=config.verify_checksums,
        )
        self._use_template = self._template_choice()
        self._switch: AttentionSwitch = install(model, self._relay)
        self._enabled = True
        self._closed = False
        self.capabilities = self._capabilities()

    # -- model switch -------------------------------------------------------------------
    def _relay(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
               value: torch.Tensor, attention_mask: torch.Tensor | None,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.hooks.attention(self, module, query, key, value, attention_mask, kwargs)

    def _capabilities(self) -> Capabilities:
        reasons: dict[str, str] = {}
        if not self._switch.active:
            reasons["attention_hook"] = self._switch.reason
        reasons["shifted_reuse"] = "not available in this version (exact-prefix reuse only)"
        return Capabilities(
            model_type=str(getattr(self.model.config, "model_type", "unknown")),
            attention_hook=self._switch.active,
            attention_backend=self._switch.backend,
            exact_reuse=True,
            shifted_reuse=False,
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
        with self._lock:
            if self._enabled:
                uninstall(self.model, self._switch)
                self._enabled = False
            if not self._closed:
                self._closed = True
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
        with self._lock:
            if self._closed:
                raise RuntimeError("this percache handle was disabled; call enable() again")
            t0 = time.perf_counter()
            prompt = self.prompt(segments)
            generate_kwargs.setdefault("max_new_tokens", 64)
            self._check_length(prompt, int(generate_kwargs["max_new_tokens"]))
            if not self._enabled:
                return self._run(prompt, [], generate_kwargs, t0, store=False)
            self.hooks.request_start(self, prompt)
            plan = self.hooks.plan_reuse(self, prompt)
            chunks: list[ChunkKV] = []
            load_misses = 0
            for i in plan.exact:
                kv = self.hooks.load_chunk(self, prompt.pieces[i])
                if kv is None:
                    load_misses += 1
                    break
                chunks.append(kv)
            gen = self._run(prompt, chunks, generate_kwargs, t0, store=True)
            gen.stats.load_misses = load_misses
            self._totals.add(gen.stats)
            self.hooks.request_end(self, prompt, gen)
            return gen

    def _run(self, prompt: Prompt, chunks: list[ChunkKV], kwargs: dict[str, Any],
             t0: float, *, store: bool) -> Generation:
        stats = GenerationStats(prompt_tokens=prompt.n_tokens)
        device = next(self.model.parameters()).device
        dtype = next(self.model.parameters()).dtype
        t_load = time.perf_counter()
        if chunks:
            cache = cache_from_chunks(chunks, dtype, device)
            stats.bytes_loaded = sum(c.nbytes for c in chunks)
            stats.approximate = any(c.keys[0].dtype != dtype for c in chunks)
        else:
            cache = empty_cache()
        stats.load_s = time.perf_counter() - t_load
        cached = cache.get_seq_length()
        if cached >= prompt.n_tokens:
            # generate() re-feeds a fully cached prompt and answers wrongly: keep one token out.
            cache.crop(prompt.n_tokens - 1)
            cached = prompt.n_tokens - 1
        stats.tokens_reused = cached
        stats.nodes_reused = len(chunks)
        stats.tokens_computed = prompt.n_tokens - cached
        ids = torch.tensor([prompt.input_ids], device=device)
        clock = _FirstTokenClock()
        processors = LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        processors.append(clock)
        pad = self.tokenizer.pad_token_id
        if pad is None:
            pad = self.tokenizer.eos_token_id
        with torch.inference_mode():
            out = self.model.generate(
                ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                logits_processor=processors, return_dict_in_generate=True,
                output_logits=True, pad_token_id=pad, **kwargs,
            )
        new = out.sequences[0, prompt.n_tokens:].tolist()
        stats.new_tokens = len(new)
        stats.ttft_s = (clock.t or time.perf_counter()) - t0
        if store:
            self._store_computed(prompt, len(chunks), cache, stats)
        stats.total_s = time.perf_counter() - t0
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        first = out.logits[0][0].detach().float().cpu() if out.logits else None
        return Generation(text, new, prompt.input_ids, stats, first)

    def _store_computed(self, prompt: Prompt, served: int, cache: Any, stats: GenerationStats) -> None:
        """Store every reusable piece this request computed (also after a partial hit)."""
        parent = prompt.pieces[served - 1].key if served else None
        for piece in prompt.pieces[served:]:
            if piece.key is None:
                break
            kv = slice_chunk(cache, piece.start, piece.end)
            before = self.store.total_bytes()
            self.hooks.store_chunk(self, piece, parent, kv)
            stats.nodes_stored += 1
            stats.bytes_stored += max(0, self.store.total_bytes() - before)
            parent = piece.key

    def stats(self) -> StatsTotals:
        """Totals over the requests this handle served."""
        return self._totals

    def __repr__(self) -> str:
        return f"PerCache({self.capabilities.summary()}, store={self.store.path or 'memory'})"


def enable(model: Any, tokenizer: Any, store: str | Path | None = None, **config: Any) -> PerCache:
    """Switch ``model`` to percache and return its handle.

    :param model: a loaded transformers causal LM.
    :param tokenizer: its tokenizer.
    :param store: None for an in-memory store, or a directory for a persistent one.
    :param config: :class:`Config` fields as keyword arguments (unknown keys raise ``ConfigError``).
    """
    return PerCache(model, tokenizer, store, Config.from_kwargs(**config))
