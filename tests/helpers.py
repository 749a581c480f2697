"""Building blocks shared by the engine tests: a tiny model, its tokenizer, a prompt, a baseline."""

from __future__ import annotations

from typing import Any

import torch

from tests.models import tiny_model
from tests.tokenizer import byte_tokenizer

__all__ = ["VOCAB", "SEGMENTS", "Recorder", "tiny_pair", "baseline"]

VOCAB = 320  # the byte tokenizer uses ids 0..259

SEGMENTS = [
    "You are a helpful assistant.",
    "Mail from Ana: rehearsal moved to Friday 6pm.",
    "Notes: budget review on Monday; Ben owns slides.",
    "Chat: Carl will bring the projector.",
    "When is the rehearsal?",
]


def tiny_pair(family: str, *, chat_template: bool = True, **overrides: Any) -> tuple[Any, Any]:
    """A tiny random model of ``family`` with the byte tokenizer."""
    model = tiny_model(family, vocab_size=VOCAB, **overrides)
    return model, byte_tokenizer(chat_template=chat_template)


def baseline(model: Any, ids: list[int], max_new_tokens: int = 8) -> tuple[list[int], torch.Tensor]:
    """Plain ``model.generate`` greedy tokens and first-step logits, no percache involved."""
    x = torch.tensor([ids])
    with torch.inference_mode():
        out = model.generate(
            x, attention_mask=torch.ones_like(x), max_new_tokens=max_new_tokens, do_sample=False,
            return_dict_in_generate=True, output_logits=True, pad_token_id=0,
        )
    return out.sequences[0, len(ids):].tolist(), out.logits[0][0].float()


class Recorder:
    """A streamer that keeps what it was given: ``puts`` (one list of ids per call), ``ended``."""

    def __init__(self) -> None:
        self.puts: list[list[int]] = []
        self.ended = 0

    def put(self, value: torch.Tensor) -> None:
        self.puts.append(value.reshape(-1).tolist())

    def end(self) -> None:
        self.ended += 1
