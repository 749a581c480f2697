"""Finding earlier prompts by sentence embedding (the seed's KV-cache recycling), optional.

Off by default: pass ``plugins=[EmbeddingSearch()]`` to :func:`percache_plugin.enable`. When a
plain prompt (``pc.complete``) is not served whole by the prefix-block index, the plugin
embeds it (all-MiniLM-L6-v2 by default; the embedder reads the prompt's start, which is what a
shared prefix is made of), ranks the earlier prompts it remembers by cosine, and for the
``top_k`` best computes the longest EXACT common token prefix. Only whole stored pieces inside
that exact prefix are reused, under their own keys (which chain the fingerprint and every id
before them), so the result is exact; nothing approximate is ever reused.

What it can add over the block index: an earlier prompt of the chunk path
(``pc.generate([system, chunk, ..., query])``) stores variable-length pieces whose keys the
block chain never produces, so a plain prompt starting with the same ids misses in the block
index and is found here. Another plain prompt's blocks are never an extra find: a common
prefix of whole blocks has the same block keys, which the index looks up already, and the
part of a common prefix that does not fill a block is not stored anywhere. :meth:`stats`
counts what the search found and what it added.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..hooks.specs import hookimpl
from ..kv.blocks import block_prompt
from ..segments import Prompt, Segment, chain_pieces

if TYPE_CHECKING:
    from ..hooks.contexts import EngineContext
    from ..rag.embeddings import Embedder
    from ..stats import Generation, GenerationStats

__all__ = ["EmbeddingSearch", "SearchStats", "common_prefix"]

_CHUNK = Segment("", "chunk")
_TAIL = Segment("", "query")


@dataclass
class SearchStats:
    """What the search did over the plain prompts it saw."""

    prompts: int = 0  # plain prompts cut into pieces
    searched: int = 0  # of those, not served whole by the block index: searched by embedding
    candidates: int = 0  # earlier prompts compared token by token
    common_tokens: int = 0  # sum over searches of the longest exact common prefix found
    index_tokens: int = 0  # sum over searches of the tokens the block index serves
    found: int = 0  # searches that served more than the block index
    extra_tokens: int = 0  # tokens served beyond what the block index serves


@dataclass(frozen=True)
class _Earlier:
    ids: tuple[int, ...]
    ends: tuple[int, ...]  # ends of its exact stored pieces
    vector: Any


def common_prefix(a: tuple[int, ...] | list[int], b: tuple[int, ...] | list[int]) -> int:
    """Length of the longest common prefix of two id sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _stored_prefix(prompt: Prompt, ctx: EngineContext) -> int:
    """Tokens served by the leading pieces of ``prompt`` the store holds."""
    served = 0
    for piece in prompt.pieces:
        if piece.key is None or not ctx.store.contains(piece.key):
            break
        served = piece.end
    return served


class EmbeddingSearch:
    """Serve a plain prompt from the exact common prefix of earlier prompts found by embedding.

    :param embedder: an embedder spec for :func:`~percache_plugin.rag.embeddings.load_embedder`
        (None: all-MiniLM-L6-v2; ``"hash"``: a model-free embedder for tests).
    :param keep: earlier prompts remembered (oldest forgotten first).
    :param top_k: candidates compared token by token per search.
    """

    def __init__(self, embedder: str | Embedder | None = None, *, keep: int = 256, top_k: int = 4) -> None:
        if keep < 1 or top_k < 1:
            raise ValueError(f"keep and top_k must be >= 1, got keep={keep}, top_k={top_k}")
        self._spec = embedder
        self._embedder: Embedder | None = None
        self._earlier: deque[_Earlier] = deque(maxlen=keep)
        self.top_k = top_k
        self.counts = SearchStats()

    def stats(self) -> dict[str, int]:
        """:class:`SearchStats` as a dict."""
        return asdict(self.counts)

    def _embed(self, ctx: EngineContext, ids: list[int] | tuple[int, ...]) -> Any:
        if self._embedder is None:
            from ..rag.embeddings import load_embedder

            self._embedder = load_embedder(self._spec)
        text = ctx.tokenizer.decode(list(ids), skip_special_tokens=True)
        return self._embedder.embed([text])[0]

    @hookimpl(tryfirst=True)
    def percache_plain_prompt(self, ctx: EngineContext, token_ids: list[int]) -> Prompt | None:
        size = ctx.config.prefix_block_tokens
        default = block_prompt(token_ids, size, ctx.fingerprint)
        self.counts.prompts += 1
        limit = len(token_ids) - 1  # the last token is always computed
        indexed = _stored_prefix(default, ctx)
        if indexed >= default.pieces[-1].start or not self._earlier:
            return None  # every full block served (or nothing to search): the index suffices
        self.counts.searched += 1
        self.counts.index_tokens += indexed
        query = self._embed(ctx, token_ids)
        earlier = list(self._earlier)
        scores = np.stack([e.vector for e in earlier]) @ query
        best_prompt, best, longest = None, indexed, 0
        for i in np.argsort(-scores)[:self.top_k]:
            cand = earlier[int(i)]
            self.counts.candidates += 1
            common = min(common_prefix(cand.ids, token_ids), limit)
            longest = max(longest, common)
            ends = [e for e in cand.ends if e <= common]
            if not ends or ends[-1] <= best:
                continue
            prompt = self._cut(ctx, token_ids, ends)
            served = _stored_prefix(prompt, ctx)
            if served > best:
                best_prompt, best = prompt, served
        self.counts.common_tokens += longest
        if best_prompt is None:
            return None
        self.counts.found += 1
        self.counts.extra_tokens += best - indexed
        return best_prompt

    @staticmethod
    def _cut(ctx: EngineContext, ids: list[int], ends: list[int]) -> Prompt:
        """Pieces ending at ``ends`` (an earlier prompt's), then blocks, then a tail."""
        parts, start = [], 0
        for end in ends:
            parts.append(ids[start:end])
            start = end
        size = ctx.config.prefix_block_tokens
        while len(ids) - start > size:
            parts.append(ids[start:start + size])
            start += size
        parts.append(ids[start:])
        return chain_pieces([_CHUNK] * (len(parts) - 1) + [_TAIL], parts, fingerprint=ctx.fingerprint)

    @hookimpl
    def percache_request_end(self, ctx: EngineContext, prompt: Prompt, stats: GenerationStats,
                             generation: Generation | None) -> None:
        if generation is None or stats.approximate or stats.tokens_shifted:
            return  # only prompts whose stored pieces are all exact tree nodes
        ends = tuple(p.end for p in prompt.reusable)
        if not ends:
            return
        ids = tuple(prompt.input_ids)
        self._earlier.append(_Earlier(ids, ends, self._embed(ctx, ids)))
