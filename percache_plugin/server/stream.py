"""Tokens to text as they are generated: a stopping criterion that detokenizes incrementally,
applies stop sequences, and stops generation when the client went away."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import LogitsProcessor, StoppingCriteria

__all__ = ["TextStream"]


class _PromptMark(LogitsProcessor):
    """Tells a :class:`TextStream` built without the prompt's length where the prompt ends:
    the first next-token distribution is computed over the prompt alone."""

    observes_only = True  # returns the scores as they are: ask() still uses the QA bank

    def __init__(self, stream: TextStream) -> None:
        self.stream = stream

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.stream._seen is None:
            self.stream._seen = int(input_ids.shape[1])
        return scores


class TextStream(StoppingCriteria):
    """Called by ``model.generate`` after every decoding step with the ids so far.

    New text goes to ``on_text`` (from the generating thread) as soon as it is complete UTF-8,
    held back only as far as it could still be the start of a stop sequence. Generation stops
    (the criterion returns True) when a stop sequence appears, the text is cut before it, or when
    :meth:`cancel` was called (a client that disconnected frees the model after one token).

    :ivar text: the text so far (after :meth:`close`: the whole answer, cut at a stop sequence).
    :ivar stopped_by: ``"stop"`` (a stop sequence), ``"cancelled"``, or ``""``.
    :ivar first_token_at: ``time.perf_counter()`` when the first new token arrived.
    :ivar processor: pass it as a logits processor when ``prompt_tokens`` is not known (None).
    :param strip: send the text as ``str.strip`` leaves it (``pc.ask`` strips its answers):
        leading whitespace is never sent, trailing whitespace only once more text follows it.
    """

    def __init__(self, tokenizer: Any, prompt_tokens: int | None, stop: Sequence[str] = (),
                 on_text: Callable[[str], None] | None = None, *, strip: bool = False) -> None:
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.on_text = on_text
        self.text = ""
        self.stopped_by = ""
        self.first_token_at: float | None = None
        self._seen = prompt_tokens
        self.processor = _PromptMark(self)
        self._ids: list[int] = []
        self._prefix = 0  # vLLM-style incremental detokenization offsets
        self._read = 0
        self._sent = 0
        self._hold = max((len(s) for s in self.stop), default=1) - 1
        self._cancel = threading.Event()
        self._strip = strip

    def cancel(self) -> None:
        """Stop at the next decoding step (thread-safe)."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor,
                 **kwargs: Any) -> torch.BoolTensor:
        done = self._cancel.is_set() or bool(self.stopped_by)
        if self._seen is None:
            raise RuntimeError("TextStream without prompt_tokens needs its processor in logits_processor")
        new = input_ids[0, self._seen:].tolist()
        if new and not done:
            if self.first_token_at is None:
                self.first_token_at = time.perf_counter()
            self._seen += len(new)
            self._ids.extend(int(t) for t in new)
            self._add(self._delta(final=False))
            done = bool(self.stopped_by)
        if self._cancel.is_set() and not self.stopped_by:
            self.stopped_by = "cancelled"
            done = True
        return torch.full((input_ids.shape[0],), done, dtype=torch.bool,  # type: ignore[return-value]
                          device=input_ids.device)

    def put_text(self, text: str) -> None:
        """Send a whole answer that was not generated (a QA-bank hit)."""
        self._add(text)
        self._send(len(self.text))

    def close(self) -> str:
        """Flush what was held back (incomplete UTF-8 at the very end included); the text."""
        if not self.stopped_by:
            self._add(self._delta(final=True))
        self._send(len(self.text))
        return self.text.strip() if self._strip else self.text

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def _delta(self, *, final: bool) -> str:
        before = self._decode(self._ids[self._prefix:self._read])
        after = self._decode(self._ids[self._prefix:])
        if len(after) <= len(before) or (after.endswith("\ufffd") and not final):
            return ""
        self._prefix, self._read = self._read, len(self._ids)
        return after[len(before):]

    def _add(self, delta: str) -> None:
        if not delta:
            return
        start = max(0, len(self.text) - self._hold)
        self.text += delta
        hits = [i for i in (self.text.find(s, start) for s in self.stop) if i >= 0]
        if hits:
            self.text = self.text[:min(hits)]
            self.stopped_by = "stop"
            self._send(len(self.text))
        else:
            self._send(len(self.text) - self._hold)

    def _send(self, upto: int) -> None:
        start = self._sent
        if self._strip:  # from the first non-space to the last one so far
            start = max(start, len(self.text) - len(self.text.lstrip()))
            upto = len(self.text[:upto].rstrip())
        if upto > start:
            chunk, self._sent = self.text[start:upto], upto
            if self.on_text is not None:
                self.on_text(chunk)
