"""Executing a reuse plan: load the planned K/V, then build the request's cache, either by
concatenating an exact prefix or by splicing exact and shifted chunks with a partial recompute."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from .attention.rope import RopeShifter
from .attention.splice import ProbeDone, SpliceCache, attention_chunk_of, splice_mask
from .cache_arg import cache_kw
from .core.preemption import Preempted
from .decode import dtype_device
from .decode.chunked import StopCheck, chunk_bounds
from .kv.assemble import Placed, assemble
from .kv.cache import cache_from_chunks, empty_cache, layer_kv, slice_chunk
from .kv.planner import ReusePlan, scope_tag
from .kv.recompute import RecomputeContext
from .kv.rounded import drop_if_rounded
from .kv.store import ChunkKV
from .segments import Prompt, node_key, scope_root
from .stats import GenerationStats

if TYPE_CHECKING:
    from .hooks.contexts import EngineContext

__all__ = ["PlanError", "ReuseRunner", "count_origin", "store_computed"]


class PlanError(RuntimeError):
    """A reuse plan that cannot be executed consistently; the request falls back to a full prefill."""


def count_origin(kv: ChunkKV, stats: GenerationStats) -> None:
    """Count a loaded node in ``stats`` by where the loader found it (``ChunkKV.origin``)."""
    if kv.origin == "ram":
        stats.ram_hits += 1
        stats.ram_bytes += kv.nbytes
    elif kv.origin == "store":
        stats.ram_misses += 1


class ReuseRunner:
    """Builds the cache of one request from a plan: loads through the hooks of ``ctx``, shifts
    with ``shifter`` (None: no shifted reuse) and runs ``model`` over the positions to compute."""

    def __init__(self, model: Any, ctx: EngineContext, shifter: RopeShifter | None) -> None:
        self._model = model
        self._ctx = ctx
        self._shifter = shifter
        self.active_splice: SpliceCache | None = None
        self._masks: dict[tuple[int | None, int | None, int], torch.Tensor] = {}
        self._text_config = model.config.get_text_config(decoder=True)
        # A splice forward only fills the cache: it runs the decoder without the lm head (over
        # every computed position that head cost about a fifth of the forward's FLOPs on
        # SmolLM2), or, where the model names no separate decoder, asks for one position's logits.
        # ModernBERT-decoder's get_decoder() answers its vocabulary projection (an nn.Linear named
        # "decoder"): only a module that takes input ids and positions is the backbone.
        get_decoder = getattr(model, "get_decoder", None)
        decoder = get_decoder() if callable(get_decoder) else None
        self._fill: torch.nn.Module = model
        if isinstance(decoder, torch.nn.Module) and decoder is not model and \
                {"input_ids", "position_ids"} <= set(inspect.signature(decoder.forward).parameters):
            self._fill = decoder
        self._no_logits: dict[str, Any] = (
            {"logits_to_keep": 1} if self._fill is model
            and "logits_to_keep" in inspect.signature(model.forward).parameters else {})

    # -- attention relay ----------------------------------------------------------------------
    def splice_mask(self, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                    kwargs: dict[str, Any]) -> torch.Tensor | None:
        """During a splice, the mask of the true positions (the model built one for contiguous
        queries) with the layer's window or attention chunk; None otherwise."""
        splice = self.active_splice
        if splice is None or splice.positions is None:
            return None
        window = kwargs.get("sliding_window")
        chunk = attention_chunk_of(self._text_config, getattr(module, "layer_idx", None))
        mkey = (window, chunk, key.shape[-2])
        if mkey not in self._masks:
            self._masks[mkey] = splice_mask(splice.positions.to(query.device), key.shape[-2],
                                            dtype=query.dtype, sliding_window=window,
                                            attention_chunk=chunk)
        return self._masks[mkey]

    # -- loading ------------------------------------------------------------------------------
    def prefetch(self, prompt: Prompt, plan: ReusePlan) -> None:
        """Start reading every node the plan loads (``percache_prefetch_chunks``), so the disk
        reads them all at once while :meth:`load_exact` checks and copies the first ones."""
        if not self._ctx.config.kv_prefetch:
            return
        keys = [prompt.pieces[i].key for i in plan.exact] + [sp.key for sp in plan.shifted]
        self._ctx.hooks.prefetch_chunks(self._ctx, tuple(k for k in keys if k is not None))

    def load_exact(self, prompt: Prompt, plan: ReusePlan, stats: GenerationStats, *,
                   layered: bool = True) -> list[ChunkKV]:
        """The exact prefix's K/V; with ``layered``, ``Config.kv_overlap_reads`` and no shifted
        chunk in the plan, possibly still being read layer by layer (the cache waits for each
        layer at its first use)."""
        chunks: list[ChunkKV] = []
        layered = layered and self._ctx.config.kv_overlap_reads and not plan.shifted
        for i in plan.exact:
            piece = prompt.pieces[i]
            assert piece.key is not None
            kv = self._ctx.hooks.load_chunk(self._ctx, piece.key, piece.token_ids, layered=layered)
            if kv is None or self._rounded(piece.key, kv):  # exact reuse ends here
                stats.load_misses += 1
                break
            count_origin(kv, stats)
            chunks.append(kv)
        return chunks

    def load_shifted(self, prompt: Prompt, plan: ReusePlan, stats: GenerationStats) -> list[Placed]:
        placed = []
        for sp in plan.shifted:
            piece = prompt.pieces[sp.index]
            kv = self._ctx.hooks.load_chunk(self._ctx, sp.key, piece.token_ids)
            if kv is None or self._rounded(sp.key, kv):
                stats.load_misses += 1
                continue
            count_origin(kv, stats)
            placed.append(Placed(kv, piece.start, sp.source_start))
        return placed

    def _rounded(self, key: str, kv: ChunkKV) -> bool:
        """A node another handle stored rounded is a miss here (:mod:`.kv.rounded`)."""
        return drop_if_rounded(self._ctx.store, key, kv, dtype_device(self._model)[0],
                               self._ctx.config.torch_storage_dtype)

    # -- building the cache -------------------------------------------------------------------
    def exact_cache(self, prompt: Prompt, chunks: list[ChunkKV],
                    stats: GenerationStats) -> tuple[Any, int, int]:
        """The chunks back to back; returns (cache, positions served, nodes served)."""
        if not chunks:
            return empty_cache(), 0, 0
        dtype, device = dtype_device(self._model)
        cache = cache_from_chunks(chunks, dtype, device, buffers=self._ctx.hooks.join_buffers(self._ctx))
        stats.bytes_loaded = sum(c.nbytes for c in chunks)
        stats.approximate = any(c.keys[0].dtype != dtype for c in chunks)
        stats.nodes_reused = len(chunks)
        cached = cache.get_seq_length()
        if cached >= prompt.n_tokens:
            # generate() re-feeds a fully cached prompt and answers wrongly: keep one token out.
            # (transformers 5 crops by a negative count of tokens to remove)
            cache.crop(-(cached - (prompt.n_tokens - 1)))
            cached = prompt.n_tokens - 1
        stats.tokens_reused = cached
        return cache, cached, len(chunks)

    def splice(self, prompt: Prompt, exact: list[ChunkKV], shifted: list[Placed], plan: ReusePlan,
               stats: GenerationStats, *, chunk: int | None = None,
               stop: StopCheck | None = None) -> tuple[Any, int, int]:
        """Inject exact and shifted chunks, recompute the chosen positions and every uncovered one
        through a SpliceCache; the last prompt token is left to ``generate``.

        The positions to compute go in one forward, or with ``stop`` (a background request), in
        ascending runs of at most ``chunk`` positions (a query only sees keys at or before its own position, so
        the result is the same) with ``stop`` checked before each run.

        :raises Preempted: when ``stop`` returned True (nothing is stored)."""
        dtype, device = dtype_device(self._model)
        length = prompt.n_tokens - 1
        placed, pos = [], 0
        for kv in exact:
            placed.append(Placed(kv, pos, pos))
            pos += kv.n_tokens
        exact_tokens = min(pos, length)
        try:
            cache, filled = assemble(placed + shifted, length, self._shifter, dtype=dtype, device=device)
        except ValueError as exc:
            raise PlanError(f"cannot assemble the plan: {exc}") from exc
        spans = tuple((p.start, min(p.start + p.kv.n_tokens, length)) for p in shifted
                      if p.start < length)
        ids = torch.tensor([prompt.input_ids], device=device)
        context = RecomputeContext(spans, lambda layer: self._probe(cache, ids, filled, exact_tokens, layer))
        chosen = self._ctx.hooks.select_recompute(self._ctx, prompt, plan, context)
        if not set(chosen) <= set(context.candidates.tolist()):
            raise PlanError("recompute strategy chose positions outside the shifted chunks")
        compute = (~filled).clone()
        compute[chosen] = True
        positions = compute.nonzero().reshape(-1)
        shifted_total = int(filled.sum()) - exact_tokens
        stats.nodes_reused = len(exact) + len(shifted)
        stats.bytes_loaded = sum(p.kv.nbytes for p in placed + shifted)
        stats.tokens_reused = exact_tokens
        stats.tokens_recomputed = len(chosen)
        stats.tokens_shifted = shifted_total - len(chosen)
        stats.approximate = stats.tokens_shifted > 0 or any(
            p.kv.keys[0].dtype != dtype for p in placed + shifted)
        n = positions.numel()
        for a, b in chunk_bounds(0, n, chunk if chunk and stop is not None else max(1, n)):
            if stop is not None and stop():
                stats.fallback = "preempted"
                raise Preempted("background prefill yielded to a foreground request or the idle budget")
            self._forward(cache, ids, positions[a:b])
        return cache, length - positions.numel(), len(exact)

    def _forward(self, cache: SpliceCache, ids: torch.Tensor, positions: torch.Tensor,
                 probe_layer: int | None = None) -> None:
        with torch.inference_mode(), cache.splice(positions, probe_layer=probe_layer):
            self.active_splice = cache
            self._masks.clear()
            try:
                self._fill(input_ids=ids[:, positions], position_ids=positions[None],
                           **cache_kw(cache), use_cache=True, **self._no_logits)
            except ProbeDone:
                pass
            finally:
                self.active_splice = None

    def _probe(self, cache: SpliceCache, ids: torch.Tensor, filled: torch.Tensor,
               exact_tokens: int, layer: int) -> torch.Tensor:
        """K/V deviation at ``layer`` of each shifted position: run layers ``0..layer`` over
        every non-exact position, compare with the injected K/V, then restore the cache."""
        positions = torch.arange(exact_tokens, filled.numel())
        saved = [tuple(t.clone() for t in layer_kv(cache, i)) for i in range(layer)]
        self._forward(cache, ids, positions, probe_layer=layer)
        for i, (k, v) in enumerate(saved):
            keys, values = layer_kv(cache, i)
            keys.copy_(k)
            values.copy_(v)
        assert cache.probed is not None
        fresh_k, fresh_v = cache.probed
        keys, values = layer_kv(cache, layer)
        sel = filled[exact_tokens:]
        dk = (fresh_k[0] - keys[0, :, exact_tokens:]).float().norm(dim=(0, 2))
        dv = (fresh_v[0] - values[0, :, exact_tokens:]).float().norm(dim=(0, 2))
        return (dk + dv)[sel]


def store_computed(ctx: EngineContext, prompt: Prompt, served: int, skip: set[int],
                   approximate: bool, cache: Any, stats: GenerationStats) -> None:
    """Store every reusable piece a request computed (also after a partial hit).

    After approximate (shifted) reuse, pieces before the first shifted one saw only exact K/V
    and join the tree as usual; later pieces were computed against approximate K/V: those that
    were served (``skip``) are not stored again, and new ones are stored outside the tree, where
    only shifted reuse finds them."""
    first_approx = min(skip) if approximate and skip else len(prompt.pieces)
    parent = prompt.pieces[served - 1].key if served else None
    tag = scope_tag(prompt.scope)  # shifted reuse finds a piece by its ids: only in its scope
    for i, piece in enumerate(prompt.pieces[served:], start=served):
        if piece.key is None:
            break
        if i in skip and i >= first_approx:
            continue
        exact = i < first_approx
        kv = slice_chunk(cache, piece.start, piece.end)
        # outside the tree, approximate K/V is keyed in the prompt's scope too (no other finds it)
        key = piece.key if exact else node_key(scope_root(ctx.fingerprint, prompt.scope), "approx", piece.token_ids)
        before = ctx.store.total_bytes()
        ctx.hooks.store_chunk(ctx, key, piece, parent if exact else None, kv, exact, tag)
        stats.nodes_stored += 1
        stats.bytes_stored += max(0, ctx.store.total_bytes() - before)
        parent = piece.key
