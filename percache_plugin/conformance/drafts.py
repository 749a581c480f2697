"""Checks of drafted decoding: verified drafts, chains or token trees, give plain greedy tokens.

Drafts are forced: the plain greedy answer, with every n-th token changed, is offered as
earlier answers (``DraftHints``) and every draft is priced as free, so verify forwards run and
both keep draft tokens and reject them. A tree's explicit 4D mask replaces the model's own
masks, which is why trees are off for sliding, local and chunked attention and ALiBi
(:func:`~percache_plugin.decode.tree.tree_model_reason`); the tree check is what would catch a
family where that list is incomplete.
"""

from __future__ import annotations

from typing import Any

from ..decode import DraftHints
from ..decode.tree import tree_model_reason
from ..stats import Generation
from .result import Outcome, failed, not_applicable, passed
from .subject import Subject, open_handle

__all__ = ["check_drafted_decoding", "check_draft_tree", "near_misses", "DRAFT_TOKENS"]

DRAFT_TOKENS = 16
"""Greedy tokens compared: enough for several verify forwards, few enough to stay cheap."""
FREE = (1.0,)
"""A verify cost curve under which every draft pays, so each one offered is verified."""
_MISSES = ((3, 7), (4, 11), (5, 13))
"""(every n-th token wrong, by how much its id is shifted): near misses wrong at different
places, so a tree branches where they disagree and a chain is rejected part-way."""


def near_misses(plain: list[int], vocab: int) -> list[list[int]]:
    """``plain`` with every n-th token replaced by another id, one sequence per ``_MISSES``."""
    return [[(t + shift) % vocab if i % n == n - 1 else t for i, t in enumerate(plain)]
            for n, shift in _MISSES]


def _vocab(subject: Subject) -> int:
    head = subject.model.get_output_embeddings()
    weight = getattr(head, "weight", None)
    return int(weight.shape[0]) if weight is not None else int(subject.model.config.vocab_size)


def _drafted(subject: Subject, tree: bool) -> tuple[Generation | None, Generation | None, str]:
    """``(plain, drafted, why not applicable)``: plain greedy tokens with percache disabled, then
    the same request decoded with forced drafts (``tree``: token trees allowed)."""
    segments = subject.segments(order=(0,), query=0)
    config: dict[str, Any] = {"drafting": True, "draft_tree": tree, "draft_verify_cost": FREE}
    with open_handle(subject, **config) as pc:
        too_long = subject.too_long(pc, segments, DRAFT_TOKENS)
        if too_long:
            return None, None, too_long
        with pc.disabled():
            plain = pc.generate(segments, **subject.greedy(DRAFT_TOKENS))
        if len(plain.token_ids) < 4:
            return plain, None, (f"plain greedy decoding stops after {len(plain.token_ids)} "
                                 "token(s): too few to draft")
        ids = [list(map(int, m)) for m in near_misses(list(plain.token_ids), _vocab(subject))]
        hints = DraftHints(token_ids={"qa_bank": ids[:2], "session": ids[2:]})
        got = pc.generate(segments, drafts=hints, **subject.greedy(DRAFT_TOKENS))
    return plain, got, ""


def _judge(plain: Generation, got: Generation, what: str) -> tuple[Outcome | None, str, dict[str, Any]]:
    """A failure when ``got`` is not ``plain``'s tokens or drafts were not both kept and
    rejected, else None; with the figure and details."""
    s = got.stats
    figure = (f"{len(got.token_ids)} tokens; drafted {s.tokens_drafted}, accepted "
              f"{s.tokens_accepted}; {s.decode_forwards} forwards")
    details: dict[str, Any] = {"plain": list(plain.token_ids), "drafted": list(got.token_ids),
               "tokens_drafted": s.tokens_drafted, "tokens_accepted": s.tokens_accepted,
               "tree_forwards": s.draft_tree_forwards, "near_ties": s.draft_near_ties}
    if got.token_ids != plain.token_ids:
        at = next((i for i, (a, b) in enumerate(zip(got.token_ids, plain.token_ids, strict=False))
                   if a != b), min(len(got.token_ids), len(plain.token_ids)))
        ties = f" ({s.draft_near_ties} near-tie argmax(es) in verify forwards)" if s.draft_near_ties else ""
        return failed(f"{what}: tokens diverge from plain greedy decoding at new token {at} "
                      f"({list(got.token_ids)} vs {list(plain.token_ids)}){ties}",
                      figure, float(at), **details), figure, details
    if s.drafting != "on":
        return failed(f"{what}: drafting was not used ({s.drafting!r})", figure, **details), figure, details
    if not 0 < s.tokens_accepted < s.tokens_drafted:
        return failed(f"{what}: the forced drafts were not both kept and rejected (drafted "
                      f"{s.tokens_drafted}, accepted {s.tokens_accepted}): verification did not "
                      "run both ways", figure, **details), figure, details
    return None, figure, details


def check_drafted_decoding(subject: Subject) -> Outcome:
    """Drafted decoding with forced drafts, partly right and partly wrong, verified one draft
    per forward, gives plain greedy decoding's tokens."""
    plain, got, why = _drafted(subject, tree=False)
    if why or plain is None or got is None:
        return not_applicable(why)
    bad, figure, details = _judge(plain, got, "drafted decoding")
    return bad or passed(figure, float(got.stats.tokens_accepted), **details)


def check_draft_tree(subject: Subject) -> Outcome:
    """Drafted decoding verifying token trees (``Config.draft_tree``) of forced near-miss
    drafts gives plain greedy decoding's tokens; not applicable where trees are off."""
    plain, got, why = _drafted(subject, tree=True)
    if why or plain is None or got is None:
        return not_applicable(why)
    bad, figure, details = _judge(plain, got, "token-tree drafting")
    if bad is not None:
        return bad
    trees = got.stats.draft_tree_forwards
    if trees == 0:
        reason = tree_model_reason(subject.model)
        return not_applicable(f"token trees are off for this model: {reason}" if reason else
                              "no verify forward fed a tree of several branches (a plugin's "
                              "extra mask, or cache layers a tree cannot be kept in)")
    return passed(f"{figure}; {trees} tree forwards", float(trees), **details)
