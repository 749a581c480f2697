"""OpenAI's ``presence_penalty``, ``frequency_penalty`` and ``logit_bias`` as logits processors.

OpenAI's formula, on the logits before temperature and nucleus filtering (transformers runs a
caller's processors before its sampling warpers)::

    logits[j] -= c[j] * frequency_penalty + (c[j] > 0) * presence_penalty

with ``c[j]`` the number of times token ``j`` was generated so far (prompt tokens do not count);
``logit_bias`` adds ``bias[j]`` to ``logits[j]``. Both are functions of the ids they are given,
so drafted decoding, which calls the processors on the ids greedy decoding would have at each
step, stays exact under them. They change greedy tokens, so they do not set
``observes_only``: ``pc.ask`` neither reads nor writes the QA bank for a request carrying one
(``assistant/exact_kwargs.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import LogitsProcessor

__all__ = ["OpenAIPenalties", "LogitBias"]


class OpenAIPenalties(LogitsProcessor):
    """Subtract OpenAI's presence and frequency penalties from the scores.

    :param presence_penalty: subtracted once from every token generated at least once.
    :param frequency_penalty: subtracted per time a token was generated.
    :param prompt_tokens: where the generated tokens start in the ids; None: learnt at the first
        call, whose ids are the prompt alone (one processor per request).
    """

    def __init__(self, presence_penalty: float, frequency_penalty: float,
                 prompt_tokens: int | None = None) -> None:
        self.presence_penalty = float(presence_penalty)
        self.frequency_penalty = float(frequency_penalty)
        self.prompt_tokens = prompt_tokens

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prompt_tokens is None:
            self.prompt_tokens = int(input_ids.shape[1])
        generated = input_ids[:, self.prompt_tokens:]
        if generated.shape[1] == 0:
            return scores
        counts = torch.zeros(scores.shape, dtype=scores.dtype, device=scores.device)
        counts.scatter_add_(1, generated, torch.ones(generated.shape, dtype=scores.dtype, device=scores.device))
        penalty = counts * self.frequency_penalty + (counts > 0).to(scores.dtype) * self.presence_penalty
        return scores - penalty  # type: ignore[return-value]


class LogitBias(LogitsProcessor):
    """OpenAI's ``logit_bias``: each bias added to its token's logit before sampling (before
    temperature, as the penalties). Like them it changes greedy tokens (no ``observes_only``).

    :param bias: ``(token id, bias)`` pairs, ids of the model's tokenizer.
    """

    def __init__(self, bias: Sequence[tuple[int, float]]) -> None:
        self.ids = [int(i) for i, _ in bias]
        self.values = [float(b) for _, b in bias]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        out = scores.clone()
        ids = torch.tensor(self.ids, dtype=torch.long, device=scores.device)
        out[:, ids] += torch.tensor(self.values, dtype=scores.dtype, device=scores.device)
        return out  # type: ignore[return-value]
