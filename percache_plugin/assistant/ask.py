"""The ask() pipeline: QA bank, then retrieval and generation through the K/V reuse path."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..best_effort import best_effort
from ..decode.sources import QA_BANK, DraftHints
from ..plugins.removal import forget_chunks
from ..rag.chunking import Chunk
from ..rag.qa_length import AnswerTokens, served_ids
from ..segments import Segment
from ..stats import GenerationStats
from .exact_kwargs import inexact_kwargs
from .grounded import hold_back_unsupported
from .relevance import best_relevance, no_documents_text, relevant

log = logging.getLogger("percache")

if TYPE_CHECKING:
    from ..core.query import Query
    from ..request import Prefilled
    from .assistant import Assistant

__all__ = ["QA_DRAFT_SIMILARITY", "qa_drafts", "answer_if_relevant", "DEFAULT_MAX_NEW_TOKENS", "Answer", "ask",
           "generate_answer", "prefill_checked", "request_cap", "segments_for"]


@dataclass
class Answer:
    """The result of :meth:`PerCache.ask`.

    :ivar text: the answer.
    :ivar source: ``"qa_bank"`` (a stored answer, no inference), ``"generated"``, or
        ``"no_documents"`` (nothing in scope relevant enough to answer from; no inference).
    :ivar sources: ids of the chunks behind the answer.
    :ivar matched_question: the stored question served (QA-bank hits).
    :ivar similarity: its cosine similarity to the question (QA-bank hits).
    :ivar rejected_by: on generation, why the closest stored question was not served.
    :ivar stats: the generation's stats (None for QA-bank hits).
    :ivar latency_s: wall time of the whole call.
    :ivar relevance: cosine similarity of the question and its best retrieved chunk (None when
        nothing was retrieved or for QA-bank hits); see ``Config.relevance_threshold``.
    :ivar relevance_embedded: retrieved chunks that had no stored vector (hook
        ``percache_chunk_vectors``), embedded during this call to compute ``relevance``.
    :ivar unsupported: for a generated answer, why it is not served to paraphrases: facts
        its sources do not support (``Config.answer_grounding``); empty when it is served.
    :ivar not_stored: for a generated answer, why it was not stored in the QA bank (the
        caller's own ``stopping_criteria`` or ``stop_strings``, or anything else than an
        end-of-sequence token or ``max_new_tokens``, ended it: a cut answer must not be served
        later as the answer; it was sampled or beam-searched: the bank serves greedy answers; it
        was generated with keyword arguments that change greedy tokens, outside
        ``exact_kwargs.EXACT_KWARGS``: such a request neither reads nor writes the bank; a
        source changed while it was generated; the store failed, as for an answer larger than
        the whole ``qa_byte_limit``); empty when it was stored. An answer that ended
        on ``max_new_tokens`` is stored with its tokens and served only to requests with a cap
        no larger (``rag/qa_length.py``).
    """

    text: str
    source: Literal["qa_bank", "generated", "no_documents"]
    sources: tuple[str, ...]
    matched_question: str | None = None
    similarity: float | None = None
    rejected_by: str | None = None
    stats: GenerationStats | None = None
    latency_s: float = 0.0
    relevance: float | None = None
    unsupported: tuple[str, ...] = ()
    relevance_embedded: int = 0
    not_stored: str = ""


def _ordered(chunks: Sequence[Chunk]) -> list[Chunk]:
    # A canonical order (document, then position) turns different questions that retrieve the
    # same chunks into the same prompt prefix: exact K/V reuse instead of shifted.
    return sorted(chunks, key=lambda c: (c.doc_id, c.index, c.id))


def segments_for(system_prompt: str, query: str, chunks: Sequence[Chunk]) -> list[Segment]:
    """The prompt of ``query`` over the given chunks, as ask() builds it (the chunks are used
    as given: they need not come from the knowledge bank)."""
    return [Segment(system_prompt, "system"),
            *(Segment(c.text, "chunk", id=c.id) for c in _ordered(chunks)), Segment(query, "query")]


def generate_answer(a: Assistant, query: Query, scope: str | None, chunks: list[Chunk] | None = None,
                    *, origin: str = "user", **generate_kwargs: Any) -> Answer:
    """Retrieve (unless ``chunks`` are given), generate, and store the QA entry."""
    t0 = time.perf_counter()
    if chunks is None:
        chunks = a.hooks.retrieve(a.ctx, query, a.config.top_k, scope)
    ordered = _ordered(chunks)
    sources = tuple(c.id for c in ordered)
    generate_kwargs.setdefault("do_sample", False)
    shared = a.engine.store.path is not None  # other handles or processes may change the documents
    # Another thread, handle or process may remove or forget a source while this one generates.
    known = _resolvable(a, ordered)
    unresolved = [c for c in ordered if c not in known] if shared else []
    if a.config.drafting and "drafts" not in generate_kwargs:
        generate_kwargs["drafts"] = qa_drafts(a, query, scope)
    with _checked_on_failure(a, known, lambda: _drop_vanished(a, query, scope, unresolved)):
        # keyed in the scope's chain: no other scope's K/V (nor its reuse count) for the same text
        gen = a.engine.generate(segments_for(a.config.system_prompt, query.text, ordered), scope=scope,
                                **generate_kwargs)
    text = gen.text.strip()
    unsupported: tuple[str, ...] = ()
    ending = (_not_greedy(a, generate_kwargs) or inexact_kwargs(generate_kwargs)
              or _ending(a, gen.token_ids, generate_kwargs))
    if isinstance(ending, str):
        with best_effort("dropping what was built on sources gone meanwhile", a.engine.stats(), gen.stats):
            _drop_gone(a, known)  # the K/V the request stored for them
            _drop_vanished(a, query, scope, unresolved)
        return Answer(text, "generated", sources, stats=gen.stats, latency_s=time.perf_counter() - t0,
                      not_stored=ending)
    with best_effort("storing the answer in the QA bank", a.engine.stats(), gen.stats):
        failed = a.hooks.qa_store(a.ctx, query, text, scope, sources, origin, ending)
        gen.stats.plugin_errors += failed  # a cache write: logged, the answer is kept
        a.engine.stats().plugin_errors += failed
        # Another thread, handle or process may have replaced or forgotten a source meanwhile
        # and deleted the answers (and K/V) built on it before this one was stored: drop them
        # now (after the store, so either this check or that deletion sees the answer).
        gone = _drop_gone(a, known) + _drop_vanished(a, query, scope, unresolved)
        if gone:
            return Answer(text, "generated", sources, stats=gen.stats, latency_s=time.perf_counter() - t0,
                          not_stored=f"its sources changed while it was generated: {', '.join(gone)}")
        if failed:  # e.g. an answer larger than the whole qa_byte_limit
            return Answer(text, "generated", sources, stats=gen.stats, latency_s=time.perf_counter() - t0,
                          not_stored=f"storing it failed in {failed} QA-bank plugin(s) (logged)")
        if shared and _retrieval_moved(a, query, scope, text, sources):
            return Answer(text, "generated", sources, stats=gen.stats, latency_s=time.perf_counter() - t0,
                          not_stored="the question retrieves other sources since: refreshed in idle time")
        unsupported = hold_back_unsupported(a, query, scope, text, ordered)
        if unsupported and a.config.debug_log:
            log.info("percache answer to %r not served to paraphrases: %s", query.text,
                     "; ".join(unsupported))
    return Answer(text, "generated", sources, stats=gen.stats, latency_s=time.perf_counter() - t0,
                  unsupported=unsupported)


def _drop_gone(a: Assistant, known: Sequence[Chunk]) -> list[str]:
    """The ids of ``known`` that no longer resolve to the same text; what was built on them
    goes (``plugins.removal.forget_chunks``: hook ``percache_sources_forgotten``, their K/V
    under every fingerprint, their predictions)."""
    resolved = _resolvable(a, known)
    gone = [c.id for c in known if c not in resolved]
    if gone:
        _forget(a, gone)
    return gone


def _forget(a: Assistant, ids: Sequence[str]) -> None:
    """``forget_chunks``; a failed write is logged and counted, and completed later (the forget
    journal): the request still reports the sources as gone."""
    with best_effort("dropping what was built on sources gone meanwhile", a.engine.stats()):
        forget_chunks(a.ctx, ids)


def _drop_vanished(a: Assistant, query: Query, scope: str | None, unresolved: Sequence[Chunk]) -> list[str]:
    """Retrieved chunks that did not resolve when the request began (a plugin's own, or removed
    right after their retrieval), still do not and are no longer retrieved: removed, as gone."""
    if not unresolved:
        return []
    now = {c.id for c in a.hooks.retrieve(a.ctx, query, a.config.top_k, scope)}
    return _drop_gone(a, [c for c in unresolved if c.id not in now])


def prefill_checked(a: Assistant, segments: Sequence[Segment], *, scope: str | None = None,
                    **kwargs: Any) -> Prefilled:
    """``Engine.prefill`` for idle work, then ask()'s check after storing: the K/V it stored for a
    chunk another handle or process removed meanwhile (or since the task resolved it) goes; a
    chunk no plugin resolves (a retriever's own) goes only if the query no longer retrieves it."""
    pieces = [Chunk(s.id, "", 0, s.text, scope) for s in segments if s.kind == "chunk" and s.id is not None]
    known = _resolvable(a, pieces)
    unresolved = [c for c in pieces if c not in known]
    query = next((s.text for s in segments if s.kind == "query"), None)

    def check_unresolved() -> None:
        if query is None:  # nothing to retrieve them by: gone, as they do not resolve
            _drop_gone(a, unresolved)
        else:
            _drop_vanished(a, a.ctx.query(query), scope, unresolved)

    with _checked_on_failure(a, known, check_unresolved):
        prefilled = a.engine.prefill(segments, scope=scope, **kwargs)
    _drop_gone(a, known)
    check_unresolved()
    return prefilled


@contextlib.contextmanager
def _checked_on_failure(a: Assistant, known: Sequence[Chunk],
                        unresolved: Callable[[], object]) -> Iterator[None]:
    """A request that raised (preempted: a background decode stores its prompt's K/V before it
    stops) is checked too before the exception goes on: the chunks it resolved, and
    (``unresolved``) those that did not resolve when it began."""
    try:
        yield
    except BaseException:
        with best_effort("dropping what was built on sources gone meanwhile", a.engine.stats()):
            _drop_gone(a, known)
            unresolved()
        raise


def _resolvable(a: Assistant, chunks: Sequence[Chunk]) -> list[Chunk]:
    """The chunks a plugin still resolves by id to the same text (hook
    ``percache_resolve_chunks``, asked one id at a time: chunks and facts resolve apart)."""
    out = []
    for chunk in chunks:
        found = a.hooks.resolve_chunks(a.ctx, [chunk.id])
        if found and len(found) == 1 and found[0].text == chunk.text:
            out.append(chunk)
    return out


def _retrieval_moved(a: Assistant, query: Query, scope: str | None, text: str,
                     sources: tuple[str, ...]) -> bool:
    """Whether the question retrieves other chunks now than those the answer was generated from
    (another handle or process added a document meanwhile, after marking the bank's stale
    answers): then the answer just stored is marked stale and refreshed in idle time."""
    now = {c.id for c in a.hooks.retrieve(a.ctx, query, a.config.top_k, scope)}
    if now == set(sources):
        return False
    mine = [e.id for e in a.hooks.qa_entries(a.ctx, scope, query.text)
            if tuple(e.sources) == sources and e.answer == text]
    a.hooks.qa_mark_stale(a.ctx, mine)
    a.idle_queue.push("refresh", query.text, scope)
    return True


def _not_greedy(a: Assistant, kwargs: dict[str, Any]) -> str:
    """Why the answer is not the greedy answer ask() gives by default, or "": a later greedy
    question must not be served a sample (a fresh store would answer it greedily)."""
    if kwargs.get("do_sample"):
        return "sampled (do_sample=True): the QA bank keeps greedy answers"
    if int(kwargs.get("num_beams", a.engine.model.generation_config.num_beams) or 1) > 1:
        return "beam search (num_beams > 1): the QA bank keeps greedy answers"
    return ""


DEFAULT_MAX_NEW_TOKENS = 64
"""The length cap of a request that names none (``Engine.generate``'s default)."""


def request_cap(kwargs: dict[str, Any]) -> int:
    """The request's ``max_new_tokens``: which stored answers it may be served (qa_length)."""
    return int(kwargs.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS))


def _ending(a: Assistant, new: Sequence[int], kwargs: dict[str, Any]) -> AnswerTokens | str:
    """The answer's tokens and whether an end-of-sequence token or ``max_new_tokens`` ended
    it, or why it is not stored: something else did (the caller's own stopping criteria or stop
    strings), so it is not the model's whole answer to any length cap."""
    eos = kwargs.get("eos_token_id", a.engine.model.generation_config.eos_token_id)
    eos_ids = {eos} if isinstance(eos, int) else set(eos or ())
    ids = tuple(int(i) for i in new)
    if ids and ids[-1] in eos_ids:
        return AnswerTokens(ids, "eos")
    if len(ids) >= request_cap(kwargs):
        return AnswerTokens(ids, "cap")
    if kwargs.get("stopping_criteria") or kwargs.get("stop_strings"):
        return "cut by the caller's stopping criteria"
    return "ended before max_new_tokens without an end-of-sequence token"


QA_DRAFT_SIMILARITY = 0.4
"""Stored answers of questions at least this similar are offered as drafts (verified by the
model, so near misses below the serving threshold or refused by a guard are safe)."""


def qa_drafts(a: Assistant, query: Query, scope: str | None, k: int = 3) -> DraftHints:
    """The stored answers of the ``k`` questions of ``scope`` most similar to ``query`` (the
    ``percache_qa_similar`` hook)."""
    entries = a.hooks.qa_similar(a.ctx, query, scope, QA_DRAFT_SIMILARITY, k)
    answers = [e.answer for e in entries if e.answer]
    return DraftHints(texts={QA_BANK: answers}) if answers else DraftHints()


def answer_if_relevant(a: Assistant, query: Query, scope: str | None, chunks: list[Chunk] | None = None,
                       **generate_kwargs: Any) -> Answer:
    """ask()'s miss path, for ask() and idle work: the question's answer over ``chunks`` (else
    retrieved now) is generated and stored only when they are relevant enough (``relevant``);
    else the no-documents answer, nothing generated or stored."""
    if chunks is None:
        chunks = a.hooks.retrieve(a.ctx, query, a.config.top_k, scope)
    relevance, embedded = best_relevance(a, query, chunks)
    if relevant(a, chunks, relevance):
        answer = generate_answer(a, query, scope, chunks, **generate_kwargs)
    else:
        if a.config.debug_log:
            log.info("percache no relevant documents for %r (best chunk similarity %s)",
                     query.text, "none" if relevance is None else f"{relevance:.3f}")
        answer = Answer(no_documents_text(scope), "no_documents", ())
    answer.relevance = relevance
    answer.relevance_embedded = embedded
    return answer


def ask(a: Assistant, query: Query, scope: str | None = None, **generate_kwargs: Any) -> Answer:
    """QA-bank lookup; on a miss, retrieve top-k chunks and generate through the reuse path.

    Everything goes through hooks: retrieval, the QA lookup and the QA store; the question is
    embedded at most once (``query.embedding``)."""
    t0 = time.perf_counter()
    chunks = a.hooks.retrieve(a.ctx, query, a.config.top_k, scope)
    cap = request_cap(generate_kwargs)
    # settings that change greedy tokens: the bank's answers are not this request's (exact_kwargs)
    result = None if inexact_kwargs(generate_kwargs, serving=True) else a.hooks.qa_lookup(
        a.ctx, query, scope, [c.id for c in chunks], cap)
    if result is not None and result.match is not None:
        entry = result.match.entry
        # An answer longer than the cap: its first tokens, what greedy decoding gives (qa_length)
        ids = served_ids(entry.tokens, cap)
        text = (entry.answer or "") if ids is None else str(
            a.engine.tokenizer.decode(list(ids), skip_special_tokens=True)).strip()
        # Serve the stored answer now; compute this question's own answer in idle time.
        if entry.question.strip().lower() != query.text.strip().lower():
            with best_effort("queueing the answer for idle time", a.engine.stats()):
                a.idle_queue.push("answer", query.text, scope)
        if a.config.debug_log:
            log.info("percache QA hit: %r served the answer of %r (similarity %.3f, entry #%d)",
                     query.text, entry.question, result.match.similarity, entry.id)
        return Answer(text, "qa_bank", entry.sources, entry.question,
                      result.match.similarity, latency_s=time.perf_counter() - t0)
    answer = answer_if_relevant(a, query, scope, chunks, **generate_kwargs)
    answer.rejected_by = result.rejected_by if result is not None else None
    answer.latency_s = time.perf_counter() - t0
    return answer
