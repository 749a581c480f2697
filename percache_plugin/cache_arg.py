"""The name transformers gives a model's K/V cache: ``cache`` from 5.24 (the keyword argument
of every model's forward and ``generate``, and the field of their outputs), ``past_key_values``
before it. 5.24 still takes the old name, with a deprecation warning, until 5.40; percache calls
the installed version by its own name, so it works on both sides of the rename and warns on
neither."""

from __future__ import annotations

import dataclasses
from typing import Any

from transformers.generation.utils import GenerateDecoderOnlyOutput

__all__ = ["CACHE_ARG", "CACHE_ARGS", "cache_kw", "decoder_output"]

CACHE_ARGS = ("cache", "past_key_values")
"""Both names: a model's forward that takes either keeps a K/V cache."""

CACHE_ARG: str = ("cache" if any(f.name == "cache" for f in dataclasses.fields(GenerateDecoderOnlyOutput))
                  else "past_key_values")
"""The installed transformers' name for the cache argument and output field."""


def cache_kw(cache: Any) -> dict[str, Any]:
    """``cache`` as the keyword argument of a model's forward or ``generate``."""
    return {CACHE_ARG: cache}


def decoder_output(sequences: Any, scores: Any, logits: Any, cache: Any) -> GenerateDecoderOnlyOutput:
    """``generate``'s output for a decoder-only model, with ``cache`` in its cache field."""
    return GenerateDecoderOnlyOutput(sequences=sequences, scores=scores, logits=logits,
                                     **cache_kw(cache))
