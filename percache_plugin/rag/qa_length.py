"""How a stored answer's generation ended, and which length caps it may be served to.

Greedy decoding with a cap of ``C`` new tokens (``max_new_tokens``) gives the first ``C``
tokens of greedy decoding with any larger cap. So a stored answer of ``L`` generated tokens:

- that ended on an end-of-sequence token (``"eos"``, the token counted in ``L``) is complete:
  a request with ``C >= L`` gets it whole, one with ``C < L`` its first ``C`` tokens;
- that ended on its cap (``"cap"``, ``L`` equal to the cap it was generated with) is served
  only to a request with ``C <= L``, as its first ``C`` tokens: a larger cap would decode on;
- an answer given by a caller (``"given"``: a user's correction, or ``QABank.add`` without
  tokens) is served whole to any request: it is not a generation of the model;
- of unknown length (stored before the bank recorded this) is never served to a request with
  a cap: it may have been cut short. It is generated again, and the new answer replaces it.

The bank serves exactly what greedy decoding with the request's cap would give, or nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

__all__ = ["ENDINGS", "AnswerTokens", "pack_ids", "serves", "served_ids", "unpack_ids"]

ENDINGS: Final = ("eos", "cap", "given")


@dataclass(frozen=True)
class AnswerTokens:
    """The token ids an answer was generated as and how its generation ended."""

    ids: tuple[int, ...]
    ended: Literal["eos", "cap"]


def serves(length: int | None, ended: str | None, cap: int | None) -> bool:
    """Whether an answer of ``length`` tokens that ended so may be served to a request with
    cap ``cap`` (``None``: no cap given, anything is served)."""
    if cap is None or ended == "given":
        return True
    if length is None or ended not in ("eos", "cap"):
        return False
    return ended == "eos" or cap <= length


def served_ids(ids: Sequence[int] | None, cap: int | None) -> Sequence[int] | None:
    """The tokens a request with cap ``cap`` gets of a servable answer when fewer than all of
    them (``None``: the stored text is served as it is)."""
    if ids is None or cap is None or cap >= len(ids):
        return None
    return ids[:max(cap, 0)]


def pack_ids(ids: Sequence[int] | None) -> bytes | None:
    """Token ids as stored (little-endian int32; the row's length is its byte count / 4)."""
    return None if ids is None else np.asarray(ids, dtype="<i4").tobytes()


def unpack_ids(blob: object) -> tuple[int, ...] | None:
    if blob is None:
        return None
    if not isinstance(blob, bytes) or len(blob) % 4:
        raise ValueError("stored answer tokens are not int32s")
    return tuple(int(i) for i in np.frombuffer(blob, dtype="<i4"))
