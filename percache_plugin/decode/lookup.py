"""Proposing drafts: match the end of the text so far against the draft sources.

Anchored sequences (whole earlier answers) are tried first, by prefix: when the generated
tokens so far equal an answer's first tokens, its next tokens are the draft. Otherwise the
last ``n`` tokens of the context (prompt and generation) are looked up as an n-gram, longest
``n`` first, and the tokens that followed the most recent occurrence are the draft. The
generation itself is indexed as it grows (a model repeating itself drafts from its own output,
as transformers' prompt lookup does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .sources import DraftSource

__all__ = ["Draft", "DraftIndex", "OUTPUT"]

OUTPUT = "output"  # the name under which the generation so far drafts from itself


@dataclass(frozen=True)
class Draft:
    """Proposed tokens and the source they were copied from."""

    tokens: tuple[int, ...]
    source: str


class DraftIndex:
    """An n-gram index over draft sources and the growing generation.

    :param sources: what to draft from.
    :param prompt: the prompt's token ids (the context before the first generated token).
    :param max_ngram: longest n-gram matched.
    :param min_ngram: shortest n-gram matched (1-grams propose too often on real text).
    :param from_output: whether the generation drafts from itself (source ``"output"``).
    """

    def __init__(self, sources: Sequence[DraftSource], prompt: Sequence[int], *,
                 max_ngram: int = 4, min_ngram: int = 2, from_output: bool = True) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self._seqs: list[list[int]] = []
        self._names: list[str] = []
        self._anchored: list[int] = []
        # n-gram -> occurrences (sequence index, position after the n-gram), oldest first
        self._grams: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for src in sources:
            for seq in src.sequences:
                if src.anchored:
                    self._anchored.append(len(self._seqs))
                self._add(list(seq), src.name)
        self._context = list(prompt)
        self._n_prompt = len(self._context)
        self._from_output = from_output
        self._out = self._add([], OUTPUT)

    def _add(self, seq: list[int], name: str) -> int:
        i = len(self._seqs)
        self._seqs.append(seq)
        self._names.append(name)
        for end in range(1, len(seq) + 1):
            self._index_end(i, end)
        return i

    def _index_end(self, i: int, end: int) -> None:
        seq = self._seqs[i]
        for n in range(self.min_ngram, self.max_ngram + 1):
            if end >= n:
                self._grams.setdefault(tuple(seq[end - n:end]), []).append((i, end))

    def append(self, token: int) -> None:
        """The decoder emitted ``token``."""
        self._context.append(token)
        if self._from_output:
            out = self._seqs[self._out]
            out.append(token)
            self._index_end(self._out, len(out))

    @property
    def generated(self) -> list[int]:
        return self._context[self._n_prompt:]

    def propose(self, k: int) -> Draft | None:
        """Up to ``k`` tokens that may follow the context, or None."""
        if k <= 0:
            return None
        gen = self.generated
        best: Draft | None = None
        for i in self._anchored:  # earlier answers, by prefix of the whole generation
            seq = self._seqs[i]
            if len(seq) > len(gen) and seq[:len(gen)] == gen:
                cand = tuple(seq[len(gen):len(gen) + k])
                if best is None or len(cand) > len(best.tokens):
                    best = Draft(cand, self._names[i])
        if best is not None:
            return best
        ctx = self._context
        for n in range(min(self.max_ngram, len(ctx)), self.min_ngram - 1, -1):
            for i, end in reversed(self._grams.get(tuple(ctx[len(ctx) - n:]), ())):
                cand = tuple(self._seqs[i][end:end + k])  # empty for the n-gram just emitted
                if cand:
                    return Draft(cand, self._names[i])
        return None
