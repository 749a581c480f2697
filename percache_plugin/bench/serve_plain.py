"""The plain arm of ``percache bench serve``: the same server over the model with no percache
(every prompt computed, nothing stored), through an object with the few members the server's
jobs use."""

from __future__ import annotations

import time
from typing import Any

from ..config import Config
from ..decode.generate import run_generate
from ..decode.seeded import seeded
from ..kv.blocks import block_prompt
from ..kv.cache import empty_cache
from ..segments import Prompt
from ..stats import Generation, GenerationStats

__all__ = ["PlainModel"]


class PlainModel:
    """``model.generate`` over a fresh cache for every request (``engine.generate`` is itself)."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.config = Config()
        self.fingerprint = "plain"
        self.engine = self

    def generate(self, prompt: Prompt, *, exact_only: bool = False, prediction: str | None = None,
                 seed: int | None = None, **kwargs: Any) -> Generation:
        """As ``Engine.generate``: ``exact_only`` holds trivially (nothing is reused) and a
        ``prediction`` only drafts there (plain decoding gives the same tokens without it)."""
        t0 = time.perf_counter()
        kwargs.setdefault("max_new_tokens", 64)
        stats = GenerationStats(prompt_tokens=prompt.n_tokens)
        with seeded(seed):
            return run_generate(self.model, self.tokenizer, prompt, empty_cache(), 0, stats, kwargs, t0, None)

    def complete(self, ids: list[int], **kwargs: Any) -> Generation:
        return self.generate(block_prompt(ids, self.config.prefix_block_tokens, self.fingerprint), **kwargs)

    def start_idle_worker(self) -> None:
        raise RuntimeError("the plain arm has no idle worker")
