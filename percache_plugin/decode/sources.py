"""Where drafts come from: named token sequences a decoder may copy from.

A :class:`DraftSource` is a name and token sequences. ``anchored`` sources hold whole earlier
answers (QA-bank answers, assistant turns of a conversation): an answer being generated that
starts like one of them is drafted from its beginning, before any n-gram can match.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DraftSource", "DraftHints", "prompt_source", "text_source", "with_prediction", "PROMPT",
           "QA_BANK", "SESSION", "PREDICTION"]

PROMPT = "prompt"
QA_BANK = "qa_bank"
SESSION = "session"
PREDICTION = "prediction"
"""Text the caller expects the answer to repeat (OpenAI's ``prediction``; ``generate(prediction=...)``)."""


@dataclass(frozen=True)
class DraftSource:
    """Token sequences drafts may be copied from.

    :ivar name: reported in the stats (``drafted_by_source``, ``accepted_by_source``).
    :ivar sequences: token ids, one tuple per text (a chunk, an answer, a turn).
    :ivar anchored: each sequence is a whole answer: a generation that starts like it is
        drafted from it by prefix, without an n-gram match.
    """

    name: str
    sequences: tuple[tuple[int, ...], ...]
    anchored: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a draft source needs a non-empty name, got {self.name!r}")
        for seq in self.sequences:
            if not all(isinstance(t, int) and t >= 0 for t in seq):
                raise ValueError(f"draft source {self.name!r}: token ids must be non-negative ints")


@dataclass(frozen=True)
class DraftHints:
    """Texts and token sequences a caller offers to draft from, by source name.

    The assistant fills ``texts[QA_BANK]`` with the stored answers of the nearest questions;
    a conversation fills ``token_ids[SESSION]`` with its earlier assistant turns; a caller's
    predicted output (``generate(prediction=...)``) goes in ``texts[PREDICTION]``. The built-in
    ``percache_draft_sources`` plugin turns every entry into an anchored :class:`DraftSource`.
    """

    texts: Mapping[str, Sequence[str]] = field(default_factory=dict)
    token_ids: Mapping[str, Sequence[Sequence[int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, texts in self.texts.items():
            if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
                raise TypeError(f"DraftHints.texts[{name!r}] must be a sequence of str")


def prompt_source(token_ids: Sequence[int]) -> DraftSource:
    """The prompt as one sequence (system prompt, chunks, question), not anchored."""
    return DraftSource(PROMPT, (tuple(int(t) for t in token_ids),))


def text_source(name: str, texts: Sequence[str], tokenizer: Any, *, anchored: bool = True) -> DraftSource:
    """Texts tokenized without special tokens (as they would continue a generation)."""
    seqs = []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if ids:
            seqs.append(tuple(int(t) for t in ids))
    return DraftSource(name, tuple(seqs), anchored)


def with_prediction(hints: DraftHints | None, prediction: str | None) -> DraftHints | None:
    """``hints`` with ``prediction`` added as ``texts[PREDICTION]`` (after any given there);
    ``hints`` as they are when ``prediction`` is None or empty."""
    if prediction is None:
        return hints
    if not isinstance(prediction, str):
        raise TypeError(f"prediction must be a str, got {type(prediction).__name__}")
    if not prediction:
        return hints
    hints = hints or DraftHints()
    texts = {**hints.texts, PREDICTION: [*hints.texts.get(PREDICTION, ()), prediction]}
    return DraftHints(texts=texts, token_ids=hints.token_ids)
