"""The ``joint`` meaning guard: one logistic rule over the similarity and combined's features,
used with tau lowered to :data:`FLOOR`.

The ``combined`` guard (:mod:`percache_plugin.rag.combined`) judges the word matches of a pair
that already reached tau (0.74), whatever its similarity. But the similarity still says
something once tau is passed: a paraphrase just under 0.74 whose every word finds its match is a
safer hit than a pair at 0.75 with one unmatched word. This guard scores

    ``WEIGHTS . (similarity, mean, worst, second, head) + BIAS >= 0``

(the four word-match features of :class:`~percache_plugin.rag.combined.Features`), and is meant
to run with the QA bank's tau at :data:`FLOOR` (``Config(similarity_threshold=FLOOR)``): a pair
just above the floor passes only when its words match very well, one well above it with a
looser match. Left at tau 0.74 it is stricter than intended (fewer hits, no more false ones).

The constants and the floor are fitted on dev data only by ``benchmarks/qa_joint_fit.py`` (the
dev pairs of ``qa_combined_fit.py``, with the ``roles`` guard on): for each floor of 0.64-0.74 a
logistic regression, its bias set so that at most 1.0% of the dev same-topic negatives pass
(combined, fitted at 1.25%, served 1.6% of the held-out ones); the floor chosen serves the most
dev positives with at most 1.0% of the QMSum val same-meeting pairs (never fitted on). Its
output: floor 0.66, 34 of 3,453 dev negatives (0.98%; out of fold 32), 117 of 131 dev
positives (out of fold 116), 18 of 2,062 same-meeting pairs; combined at its own setting 43,
115 and 12.

Off by default. Measured on held-out data (docs/BENCHMARKS.md, "QA bank: who does what to
whom"): on the old held-out sets it meets both goals (LoCoMo same-topic 1.2%, QMSum test-split
paraphrases 76%; combined 1.3% / 68%), but on the hand-written sets it serves 24-31% of the
different questions (a noun or verb swapped for one of its kind: favorite food / drink) and, on
the second of them, 75% / 70% of the paraphrases (defaults 90% / 80%). Like ``align`` and ``combined`` it needs an embedder with ``embed_words`` (else it does
not decide and the QA bank counts ``align_unavailable``), and costs one embedder call per
lookup whose candidates reach tau and pass every other guard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from percache_plugin.rag.align import EmbedWords, word_verdicts
from percache_plugin.rag.combined import features

__all__ = ["BIAS", "FEATURES", "FLOOR", "WEIGHTS", "joint_score", "joint_verdicts"]

FEATURES: Final = ("similarity", "mean", "worst", "second", "head")
"""The rule's inputs, in the order of :data:`WEIGHTS`: the cosine of the two questions, then
:data:`percache_plugin.rag.combined.FEATURES`."""
WEIGHTS: Final = (2.4716, 4.5493, 2.8631, 4.1625, 2.6381)
"""Weight of each of :data:`FEATURES` (fitted by ``benchmarks/qa_joint_fit.py``)."""
BIAS: Final = -9.1591
"""Bias, set to a 1.0% dev false-hit budget (``benchmarks/qa_joint_fit.py``)."""
FLOOR: Final = 0.66
"""The tau this guard is fitted for (``benchmarks/qa_joint_fit.py``)."""


def joint_score(similarity: float, row: Sequence[float]) -> float:
    """The rule's score for a pair of ``similarity`` with combined's feature ``row``; the
    pair passes at 0 or above."""
    values = (similarity, *row)
    return float(sum(w * x for w, x in zip(WEIGHTS, values, strict=True))) + BIAS


def joint_verdicts(pairs: Sequence[tuple[str, str, float]],
                   embed_words: EmbedWords) -> list[bool]:
    """Whether each ``(asked, stored, similarity)`` pair passes, with one ``embed_words`` call
    for every distinct question."""
    sims = {(a, b): s for a, b, s in pairs}
    return word_verdicts(
        [(a, b) for a, b, _ in pairs], embed_words,
        lambda a, wa, b, wb: joint_score(sims[(a, b)], features(a, wa, b, wb).row()) >= 0.0)
