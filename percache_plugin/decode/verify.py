"""Greedy decoding with verified drafts, as a ``custom_generate`` decoding method.

transformers 5.x offers no supported way to feed custom candidates to its assisted decoding
(``_get_candidate_generator`` is private and builds only its own generators;
``prompt_lookup_num_tokens`` reads only the prompt). It does accept a callable as
``generate(custom_generate=...)``, which replaces the decoding loop and receives generate's
prepared logits processors, stopping criteria (eos, ``max_new_tokens``, the caller's own) and
cache. :class:`DraftedDecoding` is such a loop: feed the pending token plus ``k`` draft tokens
in one forward, choose each next token exactly as greedy decoding does (processors, argmax),
keep the draft tokens up to the first disagreement, and crop the cache back to the kept
tokens (``cache.crop``). The tokens are those of plain greedy decoding; only the number of
forwards changes. Sampling is not supported here (the engine then decodes plainly).

"Those of plain greedy decoding" holds up to float rounding: a forward over several tokens runs
other matrix kernels than a one-token forward, so its logits differ in the last bits (up to
~1e-4 on SmolLM2). Only an argmax whose top two scores lie closer than that could come out
differently; every token chosen from a forward that fed draft tokens with its top two scores
within :data:`NEAR_TIE` is counted (``DraftCounts.near_ties``, ``stats.draft_near_ties``), so a
user sees when that risk existed at all.

Each forward gets the ``position_ids`` generate prepared (extended one by one past the prompt,
as generate's own loop does): a model that derives positions itself when none are passed
(RoBERTa's ``padding_idx + 1`` offset) would otherwise see other positions than plain decoding.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..cache_arg import CACHE_ARG, cache_kw, decoder_output
from .lookup import OUTPUT, Draft, DraftIndex
from .packed import PackOnDemand
from .schedule import DraftSchedule
from .sources import DraftSource
from .tree import TokenTree, keep_path, plan_tree, tree_cache_ok, tree_mask, tree_positions

__all__ = ["DraftedDecoding", "DraftCounts", "FIRST_FORWARD_MATCH", "NEAR_TIE", "PACKED_FIRST_FEED", "TREE_ALTERNATIVES",
           "extend_positions"]

# Top-two score gap under which kernel rounding (measured up to ~1e-4) could flip an argmax, with margin.
NEAR_TIE = 1e-3
# Drafts the first (prompt) forward verifies: an earlier answer by prefix, or an n-gram match of at
# least this many tokens. A prompt's last token (a template's newline) nearly always occurs earlier,
# and such one-token drafts, rarely accepted, would lengthen every prefill (its time to the first
# token) and change its float rounding against a plain prefill.
FIRST_FORWARD_MATCH = 2
# The longest first forward (uncached prompt tokens plus draft tokens) computed over packed weights
# that exist already: the verify cost curve was measured up to 16 draft tokens behind one token.
PACKED_FIRST_FEED = 17
# Occurrences per source and n-gram length whose continuations differ, offered to a token tree.
TREE_ALTERNATIVES = 3


def extend_positions(positions: torch.Tensor, length: int) -> torch.Tensor:
    """``positions`` (last dimension: sequence) continued one by one up to ``length`` entries,
    as generate extends ``position_ids`` for each new token."""
    more = length - positions.shape[-1]
    if more <= 0:
        return positions
    step = torch.arange(1, more + 1, dtype=positions.dtype, device=positions.device)
    step = step.view(*([1] * (positions.dim() - 1)), -1)
    return torch.cat([positions, positions[..., -1:] + step], dim=-1)


@dataclass
class DraftCounts:
    """What one drafted decoding did (copied into the request's stats)."""

    forwards: int = 0
    drafted: int = 0
    accepted: int = 0
    new_tokens: int = 0
    first_tokens: int = 0  # tokens the first forward emitted (its accepted draft tokens + 1)
    declined: int = 0  # drafts found but not verified: not expected to pay for the forward
    packed_calls: int = 0  # linear layers computed over oneDNN-packed weights (decode/packed.py)
    folded_calls: int = 0  # attention calls computed with folded query groups (decode/folded.py)
    tree_forwards: int = 0  # verify forwards that fed a tree of several branches (decode/tree.py)
    near_ties: int = 0  # tokens chosen in a verify forward whose top two scores were within NEAR_TIE
    forward_s: list[tuple[int, float]] = field(default_factory=list)  # (draft tokens fed, seconds) per forward
    drafted_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)

    def record(self, draft: Draft, proposed: int, accepted: int) -> None:
        """The first ``proposed`` tokens of ``draft`` were verified; ``accepted`` stood."""
        self.drafted += proposed
        self.accepted += accepted
        src = draft.source
        self.drafted_by_source[src] = self.drafted_by_source.get(src, 0) + proposed
        self.accepted_by_source[src] = self.accepted_by_source.get(src, 0) + accepted

    def record_tree(self, tree: TokenTree, path: Sequence[int]) -> None:
        """Every node of ``tree`` was verified; the nodes of ``path`` stood (each node counts for
        the draft that created it)."""
        self.drafted += len(tree)
        self.accepted += len(path)
        self.tree_forwards += not tree.is_chain
        for owner in tree.owners:
            self.drafted_by_source[owner.source] = self.drafted_by_source.get(owner.source, 0) + 1
        for node in path:
            src = tree.owners[node].source
            self.accepted_by_source[src] = self.accepted_by_source.get(src, 0) + 1


def _near_tie(scores: torch.Tensor) -> bool:
    """Whether the top two of one row of scores are within :data:`NEAR_TIE` of each other: a
    second score above the finite maximum minus :data:`NEAR_TIE` (a max and a compare over the
    vocabulary, about a third of ``topk(2)``'s time; it runs for every token judged in a verify
    forward)."""
    row = scores[0].float()
    top = row.max() if row.shape[-1] >= 2 else None
    return top is not None and bool(torch.isfinite(top)) and int((row > top - NEAR_TIE).sum()) > 1


class DraftedDecoding:
    """A ``custom_generate`` callable: greedy decoding verifying drafts from ``index``.

    :param index: the draft index (sources and the prompt).
    :param schedule: the adaptive draft length.
    :ivar draft_in_prefill: whether the first forward (the uncached prompt) also verifies
        drafts; False keeps the time to the first token that of the prompt alone (a chat turn
        computes ~30-60 tokens, where 7 draft tokens more cost ~20% of it).
    :ivar linears: packed linear weights the forwards that verify draft tokens compute with (the
        values differ from the model's own kernels by float rounding; a one-token forward uses
        the model's kernels, and so does the first forward unless the copies exist already and
        it feeds at most :data:`PACKED_FIRST_FEED` tokens, so the packing is never paid before a
        first token); None: the model's kernels throughout.
    :ivar streamer: where each new token goes (``streamer.put``, then ``streamer.end``):
        ``generate`` sends the prompt to its ``streamer`` but hands a callable
        ``custom_generate`` only the arguments that ``_sample`` lacks, so the caller's streamer
        is given here too (one passed to the call wins).
    :ivar tree: verify a token tree of several candidates per forward (:mod:`.tree`) where the
        cache allows it, after the first forward; the caller sets it only for models whose
        masks a 4D mask may replace (:func:`~percache_plugin.decode.tree.tree_model_reason`).
    :ivar alternatives: occurrences per source and n-gram length with differing continuations
        offered to a tree (:meth:`~percache_plugin.decode.lookup.DraftIndex.proposals`).
    """

    def __init__(self, index: DraftIndex, schedule: DraftSchedule | None = None) -> None:
        self.index = index
        self.schedule = schedule or DraftSchedule()
        self.counts = DraftCounts()
        self.draft_in_prefill = True
        self.linears: PackOnDemand | None = None
        self.streamer: Any = None
        self.tree = False
        self.alternatives = TREE_ALTERNATIVES

    @classmethod
    def from_sources(cls, sources: Sequence[DraftSource], prompt: Sequence[int],
                     only: Collection[str] | None = None,
                     schedule: DraftSchedule | None = None, **index: Any) -> DraftedDecoding:
        """Decoding that drafts from ``sources`` (those named in ``only``, when given) and from
        its own output (unless ``only`` leaves out ``"output"``); ``index``: further
        :class:`~percache_plugin.decode.lookup.DraftIndex` arguments (n-gram lengths)."""
        used = [s for s in sources if only is None or s.name in only]
        return cls(DraftIndex(used, prompt, from_output=only is None or OUTPUT in only, **index), schedule)

    def _judge_tree(self, tree: TokenTree, chosen: Sequence[int]) -> None:
        """Tell the schedule how each draft in ``tree`` fared against the tokens ``chosen`` in its
        forward: its leading tokens equal to them stood; the first differing one is a rejection
        (also where a sibling stood instead); tokens past a stop (eos, a length limit: ``chosen``
        ends before them with no differing token) were never judged."""
        for d, n in tree.drafts.items():
            acc = 0
            while acc < n and acc < len(chosen) and d.tokens[acc] == chosen[acc]:
                acc += 1
            # all stood, or one was rejected; else the walk stopped (eos, limit) before judging more
            self.schedule.update(d, n if acc == n or acc < len(chosen) else acc, acc)

    def follow(self, tree: TokenTree, node: int, chosen: int) -> int:
        """The tree node the walk goes on to below ``node`` (-1: the root) given the token greedy
        decoding chose there: the child holding that token, or -1 (the walk ends)."""
        return tree.child(node, chosen)

    def accept(self, draft: tuple[int, ...], chosen: int, i: int) -> bool:
        """Whether draft token ``i`` stands, given the token greedy decoding chose there."""
        return draft[i] == chosen

    def __call__(self, model: Any, input_ids: torch.LongTensor, logits_processor: Any,
                 stopping_criteria: Any, generation_config: Any, synced_gpus: bool = False,
                 streamer: Any = None, **model_kwargs: Any) -> Any:
        if generation_config.do_sample or input_ids.shape[0] != 1 or synced_gpus:
            raise ValueError("drafted decoding is greedy with a batch of one (no sampling, no synced_gpus)")
        streamer = streamer if streamer is not None else self.streamer
        mask = model_kwargs.get("attention_mask")
        if mask is not None and not bool((mask == 1).all()):
            raise ValueError("drafted decoding does not support padding (attention_mask with zeros)")
        cache = model_kwargs.get(CACHE_ARG)
        if cache is None:
            raise ValueError(f"drafted decoding needs a cache ({CACHE_ARG})")
        keep_arg = "logits_to_keep" in inspect.signature(model.forward).parameters
        positions = model_kwargs.get("position_ids")
        max_length = int(stopping_criteria.max_length or generation_config.max_length)
        ids = input_ids
        pending = ids[:, cache.get_seq_length():]
        raw: list[torch.Tensor] = []
        scores_out: list[torch.Tensor] = []
        c = self.counts
        done = pending.shape[1] == 0
        if done:
            raise ValueError("the cache holds the whole prompt; keep at least one token uncached")
        while not done:
            room = max_length - ids.shape[1] - 1  # draft tokens beyond it could never be kept
            budget = min(self.schedule.max_length, room) if self.draft_in_prefill or raw else 0
            # every candidate (anchored answer, best occurrence per source and n-gram length):
            # the schedule verifies the one promising the most tokens per unit of cost, if any
            branches = self.alternatives if self.tree and raw else 1
            found = self.index.proposals(budget, branches) if budget > 0 else []
            if not raw:  # first forward: a one-token match is too weak to lengthen the prefill
                found = [d for d in found if d.by_prefix or d.match >= FIRST_FORWARD_MATCH]
            past = cache.get_seq_length()
            tree = None
            if self.tree and raw and found and pending.shape[1] == 1 and tree_cache_ok(cache):
                tree = plan_tree(found, self.schedule, self.schedule.max_length)
                draft, tokens = None, tuple(tree.tokens) if tree is not None else ()
            else:
                draft, k = self.schedule.choose(found)
                tokens = draft.tokens[:k] if draft is not None else ()
            if found and not tokens:
                c.declined += 1
            feed = pending if not tokens else torch.cat(
                [pending, torch.tensor([tokens], dtype=ids.dtype, device=ids.device)], dim=1)
            extra: dict[str, Any] = {"logits_to_keep": len(tokens) + 1} if keep_arg else {}
            branched = tree is not None and not tree.is_chain
            if positions is not None or branched:
                if positions is None:
                    positions = torch.arange(past + 1, device=ids.device)[None]
                positions = extend_positions(positions, past + feed.shape[1])
                if branched:
                    assert tree is not None
                    extra["position_ids"] = tree_positions(tree, positions[..., past:past + 1])
                    dtype = next(model.parameters()).dtype if hasattr(model, "parameters") else torch.float32
                    extra["attention_mask"] = tree_mask(tree, past, dtype, ids.device)
                else:
                    extra["position_ids"] = positions[..., past:past + feed.shape[1]]
            # Packed weights only where draft tokens are fed: a one-token forward is plain decoding's
            # own. The first forward uses them only when they exist already and it is a verify
            # forward's size (it must not wait for the packing, nor run a long prefill on them).
            packed_first = self.linears is not None and self.linears.packed is not None \
                and feed.shape[1] <= PACKED_FIRST_FEED
            linears = self.linears if tokens and (raw or packed_first) else None
            route = linears.get().active() if linears is not None else contextlib.nullcontext()
            t0 = time.perf_counter()
            with route:
                out = model(input_ids=feed, **cache_kw(cache), use_cache=True, **extra)
            c.packed_calls += getattr(route, "calls", 0)
            c.folded_calls += getattr(route, "folds", 0)
            took = time.perf_counter() - t0
            c.forward_s.append((len(tokens), took))
            if raw:  # not the first forward, which computes the prompt's uncached tokens too
                self.schedule.observe(len(tokens), took)
            c.forwards += 1
            logits = out.logits[0, -(len(tokens) + 1):].to(dtype=torch.float32)
            accepted = 0
            node, path, chosen_now = -1, [], []
            for i in range(len(tokens) + 1):
                step = logits[node + 1:node + 2].clone() if tree is not None else logits[i:i + 1].clone()
                scores = logits_processor(ids, step)
                chosen = int(torch.argmax(scores, dim=-1))
                if tokens and _near_tie(scores):
                    c.near_ties += 1
                ids = torch.cat([ids, ids.new_tensor([[chosen]])], dim=1)  # type: ignore[assignment]
                chosen_now.append(chosen)
                self.index.append(chosen)
                raw.append(step)
                scores_out.append(scores)
                if streamer is not None:
                    streamer.put(ids[:, -1:].cpu())
                if bool(stopping_criteria(ids, scores)[0]):
                    done = True
                    break
                if tree is not None:
                    node = self.follow(tree, node, chosen)
                    if node < 0:
                        break
                    path.append(node)
                elif i == len(tokens) or not self.accept(tokens, chosen, i):
                    break
                accepted += 1
            emitted = accepted + 1 if not done else i + 1
            c.new_tokens += emitted
            if c.forwards == 1:
                c.first_tokens = emitted
            if tree is not None:
                c.record_tree(tree, path)
                self._judge_tree(tree, chosen_now)
                if branched:
                    keep_path(cache, past, path)
            elif draft is not None:
                c.record(draft, len(tokens), accepted)
                # A stop (eos, max_new_tokens) ends the draft without rejecting it: the tokens after
                # the stop were fed but never judged, and must not count against the draft's kind.
                judged = len(tokens) if not done or i == len(tokens) else accepted + (tokens[i] != chosen)
                self.schedule.update(draft, judged, accepted)
            surplus = cache.get_seq_length() - (ids.shape[1] - 1)
            if surplus > 0:
                cache.crop(-surplus)  # drop the K/V of rejected draft tokens
            pending = ids[:, -1:]
        if self.schedule.history is not None:
            self.schedule.history.merge(self.schedule.tallies)
        if streamer is not None:
            streamer.end()
        if not generation_config.return_dict_in_generate:
            return ids
        return decoder_output(ids, tuple(scores_out) if generation_config.output_scores else None,
                              tuple(raw) if generation_config.output_logits else None, cache)
