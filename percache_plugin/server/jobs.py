"""What a request runs on the model (in the runner's thread): plain generation over token ids
with prefix-block reuse, and ``pc.ask`` with retrieval and the QA bank.

Prefix blocks are keyed per scope: a token's conversations never share cached blocks with
another token's, so ``cached_tokens`` cannot tell one user what another sent. Reuse is exact
whatever ``Config.reuse`` says (shifted reuse is approximate). ``pc.ask`` keys its prompt per
scope too (its shifted reuse finds only nodes of its own scope), so an ask's ``cached_tokens``
tells nothing of another scope either.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from transformers import StoppingCriteria

from ..decode.sources import PREDICTION
from ..kv.blocks import block_prompt
from ..request import ContextLengthError
from ..segments import scope_root
from ..stats import Generation, GenerationStats
from .render import capped
from .requests import Sampling
from .stream import TextStream

__all__ = ["ClientGone", "Outcome", "run_ids", "run_ask"]


@dataclass
class Outcome:
    """The result of one job: the text and what the cache did.

    :ivar finish_reason: ``"stop"`` (end of text or a stop sequence), ``"length"``
        (``max_tokens`` reached) or ``"cancelled"`` (the client went away).
    :ivar cached_tokens: prompt tokens served from the store (exactly or shifted).
    :ivar source: ``"model"`` (plain generation), or ``pc.ask``'s ``"generated"``,
        ``"qa_bank"``, ``"no_documents"``.
    :ivar ttft_s: from the request's arrival to its first token (queueing included).
    """

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    queue_s: float
    ttft_s: float | None
    total_s: float
    source: str = "model"
    sources: tuple[str, ...] = ()
    matched_question: str | None = None
    similarity: float | None = None
    stats: GenerationStats | None = None
    source_texts: tuple[str, ...] = ()

    def cache_info(self) -> dict[str, Any]:
        """The ``percache`` field of a response: what the cache did for this request."""
        s = self.stats
        return {
            "source": self.source, "qa_bank_hit": self.source == "qa_bank",
            "sources": list(self.sources), "source_texts": list(self.source_texts),
            "matched_question": self.matched_question,
            "similarity": self.similarity, "cached_tokens": self.cached_tokens,
            "tokens_reused": s.tokens_reused if s else 0, "tokens_shifted": s.tokens_shifted if s else 0,
            "tokens_computed": s.tokens_computed if s else 0, "approximate": s.approximate if s else False,
            "ttft_s": self.ttft_s, "queue_s": self.queue_s, "total_s": self.total_s,
        }

    def prediction_tokens(self) -> tuple[int, int]:
        """OpenAI's ``accepted_prediction_tokens`` and ``rejected_prediction_tokens``: the
        predicted output's draft tokens the model kept, and those it verified and did not keep
        (prediction tokens never drafted, after the answer left the prediction for good, are in
        neither); both 0 without a prediction or when sampling."""
        s = self.stats
        if s is None:
            return 0, 0
        accepted = s.accepted_by_source.get(PREDICTION, 0)
        return accepted, s.drafted_by_source.get(PREDICTION, 0) - accepted


def _finish(gen: Generation | None, stream: TextStream, max_new: int, eos: set[int]) -> str:
    if stream.stopped_by:
        return stream.stopped_by
    if gen is not None and gen.token_ids and gen.token_ids[-1] in eos:
        return "stop"
    return "length" if gen is not None and len(gen.token_ids) >= max_new else "stop"


def _eos(model: Any) -> set[int]:
    eos = model.generation_config.eos_token_id
    return set() if eos is None else {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


def _cancelled(n_prompt: int, queue_s: float, t0: float) -> Outcome:
    return Outcome("", "cancelled", n_prompt, 0, 0, queue_s, None, time.perf_counter() - t0)


def run_ids(pc: Any, ids: Sequence[int], scope: str | None, sampling: Sampling, max_new: int,
            stream: TextStream, arrived: float, queue_s: float, prediction: str | None = None) -> Outcome:
    """Generate after ``ids`` reusing the longest cached run of prefix blocks of this scope;
    greedy decoding drafts from ``prediction`` (verified: the same tokens as without it)."""
    if stream.cancelled:
        return _cancelled(len(ids), queue_s, arrived)
    kwargs = {"max_new_tokens": max_new, "stopping_criteria": [stream], "exact_only": True,
              **sampling.generate_kwargs()}
    if prediction:
        kwargs["prediction"] = prediction
    if scope is None:  # pc.complete's path: the percache_plain_prompt hook cuts the prompt
        gen = pc.engine.complete(list(ids), **kwargs)
    else:  # blocks of this scope only (no plugin may match another scope's prompts), keyed from
        # the scope's root (segments.scope_root, as a scoped pc.ask keys its prompt) with the
        # fingerprint read in the lock hold that generates: weights another thread changes in
        # between would leave them keyed by weights that did not compute them (misses)
        engine = pc.engine
        with engine.preemption.foreground(engine.lock):
            root = scope_root(pc.fingerprint, scope)
            prompt = replace(block_prompt(ids, pc.config.prefix_block_tokens, root), scope=scope)
            gen = engine.generate(prompt, **kwargs)
    text = stream.close()
    st = gen.stats
    return Outcome(text, _finish(gen, stream, max_new, _eos(pc.model)), len(ids), len(gen.token_ids),
                   st.tokens_reused + st.tokens_shifted, queue_s, _ttft(stream, arrived),
                   time.perf_counter() - arrived, stats=st)


def _ttft(stream: TextStream, arrived: float) -> float | None:
    return None if stream.first_token_at is None else stream.first_token_at - arrived


def run_ask(pc: Any, question: str, scope: str | None, sampling: Sampling, default_max: int,
            stream: TextStream, arrived: float, queue_s: float) -> Outcome:
    """``pc.ask`` in ``scope``: a QA-bank answer, ``no_documents``, or an answer generated from
    the retrieved chunks (streamed). When the client goes away generation stops at the next
    token and ``pc.ask`` returns nothing (``"cancelled"``): it stores no cut answer in the QA
    bank (see :class:`_StopOnCancel`).

    ``max_tokens`` is checked against the context as the chat route checks it, once the
    retrieved prompt's length is known: a request without it gets ``default_max`` capped by
    the room left (asked again with the cap: the refusal comes before anything runs); one
    asking more than the room is a 400 naming ``max_tokens`` (:func:`capped`)."""
    if stream.cancelled:
        return _cancelled(0, queue_s, arrived)
    max_new = sampling.max_tokens or default_max
    try:
        answer = _ask(pc, question, scope, sampling, max_new, stream)
    except ContextLengthError as exc:
        max_new = capped(exc.limit, exc.prompt_tokens, sampling.max_tokens, default_max, "question",
                         sampling.max_tokens_field)
        answer = _ask(pc, question, scope, sampling, max_new, stream)  # the room left: it fits
    if answer is None:
        return _cancelled(0, queue_s, arrived)
    ttft: float | None
    if answer.source != "generated":
        stream.put_text(answer.text)
        ttft = time.perf_counter() - arrived
    else:
        stream.close()
        ttft = _ttft(stream, arrived)
    st = answer.stats
    new = st.new_tokens if st else 0
    reason = "length" if st is not None and new >= max_new else "stop"
    return Outcome(answer.text, reason, st.prompt_tokens if st else 0, new,
                   (st.tokens_reused + st.tokens_shifted) if st else 0, queue_s, ttft,
                   time.perf_counter() - arrived, answer.source, tuple(answer.sources),
                   answer.matched_question, answer.similarity, st,
                   _snippets(pc, answer.sources))


def _ask(pc: Any, question: str, scope: str | None, sampling: Sampling, max_new: int,
         stream: TextStream) -> Any:
    """``pc.ask``'s answer, or None when the client went away."""
    kwargs = {"max_new_tokens": max_new, **sampling.generate_kwargs()}
    # the stream's prompt mark first: it only watches; a penalty after it edits the scores and
    # keeps the request away from the QA bank (assistant/exact_kwargs.py)
    kwargs["logits_processor"] = [stream.processor, *kwargs.get("logits_processor", ())]
    try:
        return pc.ask(question, scope=scope, stopping_criteria=[_StopOnCancel(stream)], **kwargs)
    except ClientGone:
        return None


def _snippets(pc: Any, chunk_ids: Sequence[str], chars: int = 160) -> tuple[str, ...]:
    """The start of each source chunk's text, resolved through the hooks (whichever retrieval
    plugin knows them); "" for a chunk no plugin knows any more. One hook call for all ids;
    one per id only when that call defers (a plugin does not know one of them)."""
    ctx = pc.assistant.ctx
    found = pc.hooks.resolve_chunks(ctx, list(chunk_ids)) if chunk_ids else []
    if found is None or len(found) != len(chunk_ids):
        found = [(pc.hooks.resolve_chunks(ctx, [chunk_id]) or [None])[0] for chunk_id in chunk_ids]
    texts = (str(c.text) if c is not None else "" for c in found)
    return tuple(t if len(t) <= chars else t[:chars].rstrip() + "…" for t in texts)


class ClientGone(Exception):
    """The client of a ``pc.ask`` request went away (raised inside its generation)."""


class _StopOnCancel(StoppingCriteria):
    """A stream's criterion for ``pc.ask``: it never ends an answer early (the QA bank would
    store it as complete); when the client is gone it raises :class:`ClientGone` out of the
    generation, so ``ask`` returns before storing anything (the prompt's K/V, exact and
    complete, is kept as for any request)."""

    observes_only = True  # never ends an answer: the QA bank may serve such a request (exact_kwargs)

    def __init__(self, stream: TextStream) -> None:
        self.stream = stream

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        self.stream(input_ids, scores)
        if self.stream.cancelled:
            raise ClientGone("the client went away")
        return torch.zeros((input_ids.shape[0],), dtype=torch.bool,  # type: ignore[return-value]
                           device=input_ids.device)
