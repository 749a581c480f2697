"""Before the QA bank serves a generated answer to paraphrases, check it against its sources
(``Config.answer_grounding``, :mod:`percache_plugin.rag.grounding`): a flagged answer is stored
out of service, so it answers only the question that produced it, said in ``Answer.unsupported``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..rag.grounding import check_grounding

if TYPE_CHECKING:
    from ..core.query import Query
    from ..rag.chunking import Chunk
    from .assistant import Assistant

__all__ = ["GroundingCounts", "hold_back_unsupported"]


@dataclass
class GroundingCounts:
    """Generated answers checked and flagged this session (``pc.stats()``)."""

    checked: int = 0
    flagged: int = 0


def hold_back_unsupported(a: Assistant, query: Query, scope: str | None, answer: str,
                          chunks: Sequence[Chunk]) -> tuple[str, ...]:
    """Check ``answer`` (just stored for ``query``) against ``chunks``; when it is flagged, take
    its QA entry out of service (``percache_qa_mark_stale``). Returns the reasons (empty: the
    answer is supported, or the check is off)."""
    if not a.config.answer_grounding or not answer:
        return ()
    g = check_grounding(answer, [c.text for c in chunks])
    a.grounding.checked += 1
    if not g.flagged:
        return ()
    a.grounding.flagged += 1
    ids = [e.id for e in a.hooks.qa_entries(a.ctx, scope, query.text) if e.answer == answer]
    if ids:
        a.hooks.qa_mark_stale(a.ctx, ids)
    return g.reasons()
