"""Which generation keyword arguments of ``ask()`` leave its answer the QA bank's answer.

The QA bank stores and serves the answer greedy decoding gives with the handle's settings
(``plugins/answer_binding.py``). A keyword argument that changes those tokens
(``repetition_penalty``, ``eos_token_id``, ``min_new_tokens``, ``bad_words_ids``, a logits
processor that edits scores, ...) would store an answer a plain ``ask()`` must not be served,
and a stored plain answer is not what that request would generate. So a request carrying any
keyword argument outside :data:`EXACT_KWARGS`, or one of them with a value its entry refuses,
neither reads nor writes the QA bank (``Answer.not_stored`` names the arguments); everything
else (retrieval, K/V reuse) is as for any request. :data:`EXACT_KWARGS` lists only arguments
known to leave greedy tokens as they are; an argument not in it is refused, not guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ExactKwarg", "EXACT_KWARGS", "OBSERVES_ONLY", "inexact_kwargs"]

OBSERVES_ONLY = "observes_only"
"""A logits processor whose class sets this attribute to ``True`` promises to return the scores
unchanged (it only watches decoding: streaming, progress); any other processor is refused. A
stopping criterion setting it promises never to end an answer (it may watch, or raise to cancel
the request); a request with any other criterion is not served a stored answer."""


def _any(value: object) -> bool:
    return True


def _observers(value: object) -> bool:
    return all(getattr(p, OBSERVES_ONLY, False) is True for p in (value or ()))  # type: ignore[attr-defined]


@dataclass(frozen=True)
class ExactKwarg:
    """A ``generate`` keyword argument ``ask()`` may carry and still read and write the QA bank
    (with a value ``exact`` accepts), and why that is exact."""

    name: str
    why: str
    exact: Callable[[object], bool] = _any
    serve: Callable[[object], bool] | None = None
    """Whether a request with this value may be served a stored answer (None: as ``exact``):
    an argument that can end an answer early may generate an answer worth storing (if it did not
    end it), but a stored whole answer is not what such a request would generate."""


_SAMPLING = "read only when sampling; a sampled answer is not stored (a greedy answer is one " \
            "the sample could be, and is served to it, as before)"

EXACT_KWARGS: tuple[ExactKwarg, ...] = (
    ExactKwarg("max_new_tokens", "a length cap: the length guard serves an answer only to caps "
                                 "it fits (rag/qa_length.py)"),
    ExactKwarg("do_sample", "False is greedy decoding; a sampled answer is not stored"),
    ExactKwarg("temperature", _SAMPLING),
    ExactKwarg("top_p", _SAMPLING),
    ExactKwarg("top_k", _SAMPLING),
    ExactKwarg("min_p", _SAMPLING),
    ExactKwarg("typical_p", _SAMPLING),
    ExactKwarg("seed", _SAMPLING),
    ExactKwarg("num_beams", "1 is greedy decoding; beam search gives other tokens",
               lambda v: v in (None, 1)),
    ExactKwarg("stopping_criteria", "ends an answer early only: an answer it cut is not stored "
                                    "(ask._ending); served only when every criterion never ends "
                                    f"an answer (class attribute {OBSERVES_ONLY} = True: it may "
                                    "watch or cancel), else a stored whole answer is not what the "
                                    "request would generate", serve=_observers),
    ExactKwarg("stop_strings", "ends an answer early only: an answer it cut is not stored; never "
                                "served (the stored answer may hold a stop string)",
               serve=lambda v: not v),
    ExactKwarg("logits_processor", "only processors that leave the scores as they are "
                                   f"(class attribute {OBSERVES_ONLY} = True)", _observers),
    ExactKwarg("streamer", "watches the tokens, does not choose them"),
    ExactKwarg("drafts", "percache's verified drafts: the tokens of greedy decoding"),
)

_BY_NAME: Mapping[str, ExactKwarg] = {k.name: k for k in EXACT_KWARGS}


def _ok(name: str, value: object, serving: bool) -> bool:
    entry = _BY_NAME.get(name)
    if entry is None:
        return False
    check = entry.serve if serving and entry.serve is not None else entry.exact
    return check(value)


def inexact_kwargs(kwargs: Mapping[str, Any], serving: bool = False) -> str:
    """Why the answer of a request with ``kwargs`` may not be stored (``serving``: why the
    request may not be served a stored answer), or "" when it may."""
    bad = [name for name, value in kwargs.items() if not _ok(name, value, serving)]
    if not bad:
        return ""
    return (f"generated with {', '.join(sorted(bad))}: the QA bank keeps the answers of greedy "
            "decoding without such settings")
