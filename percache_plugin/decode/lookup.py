"""Proposing drafts: match the end of the text so far against the draft sources.

Anchored sequences (whole earlier answers) are tried first, by prefix: when the generated
tokens so far equal an answer's first tokens, its next tokens are the draft. Otherwise the
last ``n`` tokens of the context (prompt and generation) are looked up as an n-gram, longest
``n`` first (down to a single token), and the tokens that followed the occurrence agreeing with
the context furthest back are the draft. The generation itself is indexed as it grows (a model
repeating itself drafts from its own output, as transformers' prompt lookup does).
:meth:`DraftIndex.proposals` lists every candidate (the best occurrence per source and n-gram
length) so that the schedule can verify the kind of draft most likely to stand.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from .sources import DraftSource

__all__ = ["Draft", "DraftIndex", "OUTPUT", "MAX_NGRAM", "MIN_NGRAM"]

OUTPUT = "output"  # the name under which the generation so far drafts from itself


MAX_MATCH = 16  # context tokens compared when measuring how long an n-gram match runs
MAX_NGRAM = 4  # longest n-gram looked up (a match then runs back up to MAX_MATCH tokens)
MIN_NGRAM = 1  # shortest n-gram looked up


@dataclass(frozen=True)
class Draft:
    """Proposed tokens and the source they were copied from.

    :ivar match: how many tokens before the draft agree with the context (the matched n-gram
        extended backwards, at most :data:`MAX_MATCH`); for a draft by prefix of an earlier
        answer, the length of the generation so far.
    :ivar by_prefix: copied from an anchored source whose start equals the whole generation.
    :ivar rank: 0 for the best occurrence of its source and n-gram; 1, 2, ... for further
        occurrences continuing with other tokens (listed only for token trees, :mod:`.tree`),
        best match first: their own draft kind, so their acceptance is learned apart.
    """

    tokens: tuple[int, ...]
    source: str
    match: int = 0
    by_prefix: bool = False
    rank: int = 0


def _ends(a: np.ndarray, gram: Sequence[int]) -> np.ndarray:
    """Positions just after each occurrence of ``gram`` in ``a``, ascending (vectorized: a
    scan of a few thousand tokens costs microseconds, and nothing is built per n-gram)."""
    n, size = len(gram), len(a)
    if size < n:
        return np.empty(0, dtype=np.int64)
    hit = a[:size - n + 1] == gram[0]
    for j in range(1, n):
        hit &= a[j:size - n + 1 + j] == gram[j]
    return np.flatnonzero(hit) + n


def _run(ctx: Sequence[int], seq: Sequence[int], end: int, n: int) -> int:
    """How many tokens before ``seq[end]`` equal the end of ``ctx`` (at least the ``n`` matched,
    at most :data:`MAX_MATCH`)."""
    while n < MAX_MATCH and n < end and n < len(ctx) and seq[end - n - 1] == ctx[len(ctx) - n - 1]:
        n += 1
    return n


class DraftIndex:
    """An n-gram index over draft sources and the growing generation.

    :param sources: what to draft from.
    :param prompt: the prompt's token ids (the context before the first generated token).
    :param max_ngram: longest n-gram matched.
    :param min_ngram: shortest n-gram matched. 1: a single token matches too, as its own draft
        kind (``source/1``), whose acceptance the schedule learns like any other's; on the
        development meetings of ``percache bench decode`` that replayed 2.35x against 2.18x with
        2-grams at the shortest (``benchmarks/draft_replay.py``, docs/BENCHMARKS.md).
    :param from_output: whether the generation drafts from itself (source ``"output"``).
    :param max_candidates: occurrences of the matched n-gram compared per sequence (the latest
        ones): the draft follows the one whose match with the context runs furthest back.

    Sequences are kept as arrays and scanned at each proposal (:func:`_ends`) rather than
    indexed n-gram by n-gram up front, which cost tens of milliseconds per request before the
    first token on a 2k-token prompt.
    """

    def __init__(self, sources: Sequence[DraftSource], prompt: Sequence[int], *,
                 max_ngram: int = MAX_NGRAM, min_ngram: int = MIN_NGRAM, from_output: bool = True,
                 max_candidates: int = 16) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram}, {max_ngram}")
        self.max_ngram = max_ngram
        self.max_candidates = max_candidates
        self.min_ngram = min_ngram
        self._seqs: list[list[int]] = []
        self._arrays: list[np.ndarray | None] = []  # None: the growing output, converted per scan
        self._names: list[str] = []
        self._anchored: list[int] = []
        for src in sources:
            for seq in src.sequences:
                if src.anchored:
                    self._anchored.append(len(self._seqs))
                self._seqs.append(list(seq))
                self._arrays.append(np.asarray(self._seqs[-1], dtype=np.int64))
                self._names.append(src.name)
        self._context = list(prompt)
        self._n_prompt = len(self._context)
        self._from_output = from_output
        self._out = len(self._seqs)
        self._seqs.append([])
        self._arrays.append(None)
        self._names.append(OUTPUT)

    def append(self, token: int) -> None:
        """The decoder emitted ``token``."""
        self._context.append(token)
        if self._from_output:
            self._seqs[self._out].append(token)

    @property
    def generated(self) -> list[int]:
        return self._context[self._n_prompt:]

    def propose(self, k: int) -> Draft | None:
        """Up to ``k`` tokens that may follow the context, or None.

        Earlier answers (anchored sources) by prefix of the whole generation first; then the
        longest n-gram ending the context: of its occurrences, the one whose agreement with the
        context runs furthest back (up to :data:`MAX_MATCH` tokens); ties go to the output, then
        the sources from the last to the first, the latest position in each first."""
        if k <= 0:
            return None
        gen = self.generated
        best: Draft | None = None
        for i in self._anchored:  # earlier answers, by prefix of the whole generation
            seq = self._seqs[i]
            if len(seq) > len(gen) and seq[:len(gen)] == gen:
                cand = tuple(seq[len(gen):len(gen) + k])
                if best is None or len(cand) > len(best.tokens):
                    best = Draft(cand, self._names[i], len(gen), True)
        if best is not None:
            return best
        for found in self._by_ngram(k):
            return found
        return None

    def proposals(self, k: int, alternatives: int = 1) -> list[Draft]:
        """Every candidate :meth:`propose` chooses among, best first: the anchored answer that
        continues the generation by prefix, then for each n-gram length (longest first) the
        best occurrence in each source. The schedule may verify a later one whose kind is
        accepted more often (:meth:`~percache_plugin.decode.schedule.DraftSchedule.choose`).
        With ``alternatives`` > 1, up to that many occurrences per source and n-gram length
        whose continuations start with different tokens (``Draft.rank`` 1, 2, ...: branches
        of a token tree)."""
        if k <= 0:
            return []
        gen = self.generated
        out: list[Draft] = []
        for i in self._anchored:
            seq = self._seqs[i]
            if len(seq) > len(gen) and seq[:len(gen)] == gen:
                cand = tuple(seq[len(gen):len(gen) + k])
                if not out or len(cand) > len(out[0].tokens):
                    out[:1] = [Draft(cand, self._names[i], len(gen), True)]
        for d in self._by_ngram(k, every=True, alternatives=alternatives):
            if d not in out:  # a shorter n-gram finds the longer one's occurrences again
                out.append(d)
        return out

    def _by_ngram(self, k: int, every: bool = False, alternatives: int = 1) -> Iterator[Draft]:
        """For the longest n-gram ending the context that occurs, its best occurrence; with
        ``every``, for each n-gram length in turn, the best occurrence per source name (and up
        to ``alternatives - 1`` more with other first tokens)."""
        ctx = self._context
        for n in range(min(self.max_ngram, len(ctx)), self.min_ngram - 1, -1):
            gram = ctx[len(ctx) - n:]
            found: dict[str, Draft] = {}
            other: dict[str, dict[int, Draft]] = {}  # source -> first token -> best occurrence
            top: Draft | None = None
            for i in range(len(self._seqs) - 1, -1, -1):
                seq = self._seqs[i]
                arr = self._arrays[i]
                ends = _ends(np.asarray(seq, dtype=np.int64) if arr is None else arr, gram)
                # occurrences with a token after them (none after the n-gram just emitted), the
                # latest first; the one whose match runs furthest back wins (ties: the latest)
                usable = ends[ends < len(seq)][-self.max_candidates:]
                name = self._names[i]
                for end in usable[::-1].tolist():
                    run = _run(ctx, seq, end, n)
                    if top is None or run > top.match:
                        top = Draft(tuple(seq[end:end + k]), name, run)
                    if name not in found or run > found[name].match:
                        found[name] = Draft(tuple(seq[end:end + k]), name, run)
                    if alternatives > 1:
                        by_first = other.setdefault(name, {})
                        if seq[end] not in by_first or run > by_first[seq[end]].match:
                            by_first[seq[end]] = Draft(tuple(seq[end:end + k]), name, run)
            if top is not None and not every:
                yield top
                return
            for best in sorted(found.values(), key=lambda d: -d.match):
                yield best
                rest = [d for t, d in other.get(best.source, {}).items() if t != best.tokens[0]]
                for rank, d in enumerate(sorted(rest, key=lambda d: -d.match)[:alternatives - 1], start=1):
                    yield Draft(d.tokens, d.source, d.match, False, rank)
