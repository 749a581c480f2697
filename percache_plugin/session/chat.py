"""One chat turn on a session: compute only what the session's cache lacks, then generate."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from transformers import DynamicCache

from ..decode import DraftHints, context_limit, context_note, run_generate
from ..decode.sources import SESSION
from ..segments import Prompt, PromptPiece, Segment
from .blocks import Tagger, extend_from_blocks, publish_blocks
from .edits import session_editor
from .evict import make_room
from .layout import ChatLayout
from .masking import SessionKeepMask
from .memory_region import apply_region, region_tokens, store_region
from .reply import ChatStats, Reply
from .state import RegionFact, Session, Turn, cache_bytes, cache_tokens, crop_to

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["ChatRunner", "MessageTooLong"]


class MessageTooLong(ValueError):
    """A message (plus the reply's token allowance) does not fit the session's budget or the
    model's context."""


class ChatRunner:
    """Runs turns on sessions for one engine; ``tag`` records the prefix blocks a turn
    publishes before they are stored (:func:`.blocks.publish_blocks`)."""

    def __init__(self, engine: Engine, layout: ChatLayout, tag: Tagger) -> None:
        self.engine = engine
        self.layout = layout
        self.tag = tag
        self.keep_mask = SessionKeepMask()
        engine.plugins.register(self.keep_mask, name=f"percache-session-mask-{id(self)}")

    def _eos(self) -> set[int]:
        eos = getattr(self.engine.model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = self.engine.tokenizer.eos_token_id
        return set(eos) if isinstance(eos, list) else ({eos} if eos is not None else set())

    def check_fits(self, session: Session, turn_ids: list[int], max_new: int, memory: int = 0,
                   region: list[RegionFact] | None = None) -> None:
        """Raise :class:`MessageTooLong` unless the turn fits the budget and the model's context
        after the head and the memory region (``region``: the one the turn sets). ``memory``:
        the tokens of recalled facts in ``turn_ids``; the error names them, and the region."""
        budget = self.engine.config.session_kv_tokens
        need = len(turn_ids) + max_new
        if budget is not None and need > budget:
            raise MessageTooLong(
                f"message of {len(turn_ids)} tokens{_recalled(memory)} plus max_new_tokens={max_new} "
                f"exceeds session_kv_tokens={budget}; shorten it or raise the budget")
        limit = context_limit(self.engine.model)
        start = session.turns_start if region is None else \
            len(session.head_ids) + region_tokens(self.engine, session, region)
        if limit is not None and start + need > limit:
            raise MessageTooLong(
                f"message of {len(turn_ids)} tokens{_recalled(memory)} plus max_new_tokens={max_new} "
                f"exceeds the model's context of {limit} tokens{context_note(self.engine.model)}"
                f"{_recalled(start - len(session.head_ids), ' after a memory region of')}")

    def check_context(self, session: Session, need: int, region: list[RegionFact] | None) -> None:
        """Raise :class:`MessageTooLong` unless the whole conversation fits the model's context:
        head, memory region, every turn still holding positions (masked ones too) and ``need``
        (the new turn and its reply allowance). Runs after eviction, so with
        ``session_kv_tokens`` only what eviction kept counts; without it the history grows
        until this refuses, rather than the model running past its positions."""
        limit = context_limit(self.engine.model)
        if limit is None:
            return
        head = len(session.head_ids)
        memory = len(session.memory_ids) if region is None else region_tokens(self.engine, session, region)
        history = sum(t.n_tokens for t in session.turns)
        total = head + memory + history + need
        if total <= limit:
            return
        budget = self.engine.config.session_kv_tokens
        fix = ("set Config.session_kv_tokens so the oldest turns leave" if budget is None else
               f"lower session_kv_tokens={budget} (pinned turns and the head are not counted in it)")
        raise MessageTooLong(
            f"session {session.name!r}: {total} tokens (head {head}, memory region {memory}, "
            f"history {history} in {len(session.turns)} turns, new turn and max_new_tokens {need}) "
            f"exceed the model's context of {limit} tokens{context_note(self.engine.model)}; "
            f"{fix}, or reset the session")

    def _follow_layout(self, session: Session) -> None:
        """A session that never had a turn starts with the head and glue of the layout in use
        now (the chat template setting may have changed since it was created), as a new one
        would. A session whose saved head was unreadable gets the head of its system prompt."""
        if session.head_unreadable:
            session.head_ids, session.head_unreadable = self.layout.head(session.system)[0], False
            session.cache, session.keep = DynamicCache(), None
            session.saved_upto, session.rewrite, session.approx_from = 0, True, None
            return
        if session.next_turn != 1:
            return
        head, glue = self.layout.head(session.system)
        if head != session.head_ids or glue != session.first_glue:
            session.head_ids, session.first_glue = head, glue
            session.cache, session.keep = DynamicCache(), None
            session.saved_upto, session.rewrite, session.approx_from = 0, True, None

    def turn(self, session: Session, message: str, stats: ChatStats, t0: float,
             generate_kwargs: dict[str, Any], memory: str = "",
             region: list[RegionFact] | None = None) -> Reply:
        """Generate the reply to ``message`` (the caller holds the session's lock and has made
        room); the session's cache ends holding every conversation position but at most one.
        ``memory`` (recalled facts, already formatted) is put before the message in the turn;
        ``region`` (None: unchanged) becomes the session's memory region, its facts' stored K/V
        spliced (see :mod:`.memory_region`)."""
        if not isinstance(message, str) or not message:
            raise ValueError(f"message must be a non-empty str, got {message!r}")
        self._follow_layout(session)
        kwargs = dict(generate_kwargs)
        kwargs.setdefault("max_new_tokens", 64)
        turn_ids = self.layout.turn(memory + message, session.glue())
        bare = self.layout.turn(message, session.glue()) if memory else None
        if bare is not None:
            stats.memory_tokens = len(turn_ids) - len(bare)
        self.check_fits(session, turn_ids, int(kwargs["max_new_tokens"]), stats.memory_tokens, region)
        start = None if region is None else len(session.head_ids) + region_tokens(self.engine, session, region)
        make_room(self.engine, session, len(turn_ids) + int(kwargs["max_new_tokens"]), message, stats, start)
        self.check_context(session, len(turn_ids) + int(kwargs["max_new_tokens"]), region)
        editor = session_editor(session, self.engine.shifter,
                                self.engine.capabilities.reasons.get("shifted_reuse", ""))
        self.engine.hooks.edit_cache(self.engine.ctx, session, editor)
        if editor.edits:
            stats.cache_edits += len(editor.edits)
            stats.approximate = True
            session.rewrite, session.saved_upto = True, 0
            session.approximate_from(0)  # an edit may change any position: publish nothing
        if session.restored:
            stats.restored_from, session.restored = session.restored, ""
        if region is not None:
            apply_region(self.engine, session, region, stats,
                         shifted=self.engine.config.memory_recall_mode == "splice")
        full = session.ids + turn_ids
        if not cache_tokens(session.cache):
            session.cropped(0)  # nothing cached (weights changed, restored from ids): all exact again
        extend_from_blocks(self.engine, session, full, stats)
        cache = session.cache
        cached = cache_tokens(cache)
        if session.reuses_approximate(cached):
            stats.approximate = True  # K/V an earlier turn shifted, masked or edited is still attended
        stats.prompt_tokens = len(full)
        stats.history_tokens = session.n_tokens
        stats.tokens_reused = cached
        if stats.restored_from in ("ids", "weights_changed"):
            stats.history_recomputed = session.n_tokens - cached
        prompt = Prompt((PromptPiece(Segment("", "query"), tuple(full), 0, None),))
        earlier = DraftHints(token_ids={SESSION: [t.reply_ids for t in session.turns]})
        drafting = self.engine.drafting(prompt, kwargs, earlier, stats)
        if drafting is not None:
            drafting.draft_in_prefill = False  # the turn's TTFT is that of its new tokens alone
        try:
            with self.keep_mask.active(session.keep):
                gen = run_generate(self.engine.model, self.engine.tokenizer, prompt, cache, cached,
                                   stats, kwargs, t0, None, None, drafting)
        except BaseException:
            crop_to(cache, cached)  # generate may have grown it part way
            raise
        new = list(gen.token_ids)
        reply_ids = new[:-1] if new and new[-1] in self._eos() else new
        turn = Turn(session.next_turn, message, turn_ids, reply_ids, gen.text,
                    fact_ids=[str(i) for i in stats.fact_ids] if bare is not None else [], bare_ids=bare)
        session.turns.append(turn)
        session.next_turn += 1
        n = session.n_tokens
        if cache_tokens(cache) > n:  # cannot happen with a DynamicCache; never serve beyond the ids
            crop_to(cache, n)
        if session.keep is not None and session.keep.numel() < cache_tokens(cache):
            session.keep = _extend(session.keep, cache_tokens(cache))
        store_region(self.engine, session, stats)
        stats.blocks_published = publish_blocks(self.engine, session, stats, self.tag)
        stats.turn_id = turn.turn_id
        stats.kv_tokens = cache_tokens(cache)
        stats.kv_bytes = cache_bytes(cache)
        stats.total_s = time.perf_counter() - t0
        return Reply(gen.text, new, turn.turn_id, stats, full, gen.first_logits)


def _recalled(tokens: int, what: str = " with recalled memory facts of") -> str:
    """Names the recalled facts in a too-long error: a fact too long for every turn that
    recalls it is shortened (``pc.memory.update``) or forgotten, or ``memory_k`` lowered."""
    if not tokens:
        return ""
    return f"{what} {tokens} tokens (shorten a long fact with pc.memory.update, or lower memory_k)"


def _extend(keep: Any, n: int) -> Any:
    import torch

    return torch.cat([keep, torch.ones(n - keep.numel(), dtype=torch.bool, device=keep.device)])
