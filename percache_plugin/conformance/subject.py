"""The model under test, the suite's options, and what every check shares: prompts, handles,
a same-tokenization baseline and tolerances."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from ..attention.hf_private import attn_implementation
from ..decode import context_limit
from ..handle import PerCache, enable
from ..stats import Generation

__all__ = [
    "SYSTEM",
    "CHUNKS",
    "QUERIES",
    "SuiteOptions",
    "Subject",
    "open_handle",
    "logits_tolerance",
    "compare_generations",
]

SYSTEM = "You are a personal assistant. Answer briefly from the user's notes."
CHUNKS: tuple[str, ...] = (
    "Mail from Ana (Mon): The choir rehearsal moved from Thursday to Friday at 6 pm, in the "
    "small hall of the community centre. Bring the new sheet music.",
    "Meeting notes (Tue): Budget review with Ben. Travel costs are 12% over plan; Ben will send "
    "revised numbers by Wednesday noon. Next review is on the 14th.",
    "Chat with Carl (Wed): Carl borrowed the projector for the rehearsal and will return it on "
    "Saturday morning. He asked whether Dana is joining.",
    "Reminder (Thu): Dentist appointment on the 21st at 9:30. The clinic moved to Elm Street 4; "
    "parking is behind the bakery.",
)
QUERIES: tuple[str, ...] = (
    "When and where is the choir rehearsal?",
    "Who has the projector and when will it be back?",
    "What did Ben promise to send, and by when?",
)
FP32_LOGITS_TOL = 1e-4
"""Exact reuse in fp32: first-token logits within this absolute difference (the contract)."""
HALF_LOGITS_TOL = 2e-2
"""Exact reuse in bf16/fp16: within this fraction of the logits' scale, ``max(1, max|logits|)``."""


def logits_tolerance(dtype: torch.dtype, reference: torch.Tensor) -> float:
    """The absolute logits tolerance of exact reuse for a model computing in ``dtype``."""
    if dtype == torch.float32 or dtype == torch.float64:
        return FP32_LOGITS_TOL
    return HALF_LOGITS_TOL * max(1.0, float(reference.abs().max()))


@dataclass(frozen=True)
class SuiteOptions:
    """Knobs of the suite (defaults suit real models; the built-in tiny ones relax one).

    :ivar min_agreement: pass threshold of shifted reuse's teacher-forced top-1 agreement with a
        full prefill.
    :ivar teacher_tokens: teacher-forced tokens per prompt in the shifted-reuse check.
    :ivar new_tokens: greedy tokens compared by the exact-reuse checks.
    :ivar max_window_tokens: longest prompt the sliding-window check may build; a window
        longer than this makes the check not applicable.
    :ivar max_copy_params: largest model (parameters) the dtype checks copy to another dtype.
    :ivar engine_config: :class:`~percache_plugin.Config` keywords for every handle the suite
        opens (e.g. ``{"verify_checksums": False}``).
    :ivar plugins: plugin objects registered on every handle the suite opens, and consulted for
        ``percache_model_profile`` by the RoPE check.
    """

    min_agreement: float = 0.75
    teacher_tokens: int = 16
    new_tokens: int = 8
    max_window_tokens: int = 4608
    max_copy_params: int = 1_000_000_000
    engine_config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    plugins: tuple[object, ...] = ()

    def __post_init__(self) -> None:
        if not 0.0 <= self.min_agreement <= 1.0:
            raise ValueError(f"min_agreement must be within [0, 1], got {self.min_agreement!r}")
        for name in ("teacher_tokens", "new_tokens", "max_window_tokens", "max_copy_params"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        object.__setattr__(self, "engine_config", MappingProxyType(dict(self.engine_config)))
        object.__setattr__(self, "plugins", tuple(self.plugins))


@dataclass(frozen=True)
class Subject:
    """A loaded model and its real tokenizer, under a label, with the suite's options."""

    model: Any
    tokenizer: Any
    label: str = "model"
    options: SuiteOptions = field(default_factory=SuiteOptions)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def segments(self, order: Sequence[int] = (0, 1, 2), query: int = 0) -> list[str]:
        """``[system, chunks in order, query]`` as plain text."""
        return [SYSTEM, *(CHUNKS[i] for i in order), QUERIES[query]]

    @property
    def context(self) -> int | None:
        """The model's context length, if its config says."""
        return context_limit(self.model)

    def too_long(self, pc: PerCache, segments: Sequence[str], new_tokens: int) -> str:
        """Why ``segments`` plus ``new_tokens`` do not fit the model's context ("" if they do)."""
        n = pc.prompt(segments).n_tokens
        if self.context is not None and n + new_tokens > self.context:
            return (f"the check's prompt ({n} tokens with this tokenizer) plus {new_tokens} new "
                    f"tokens exceeds the model's context of {self.context}")
        return ""

    def greedy(self, new_tokens: int | None = None) -> dict[str, Any]:
        """``generate`` keywords for a deterministic greedy run."""
        return {"max_new_tokens": new_tokens or self.options.new_tokens, "do_sample": False}


@contextlib.contextmanager
def open_handle(subject: Subject, *, model: Any = None, store: str | Path | None = None,
                **config: Any) -> Iterator[PerCache]:
    """Enable percache on ``model`` (default: the subject's) with the suite's plugins registered
    before the handle is built, and on exit disable it and verify the model's attention
    implementation is restored."""
    target = subject.model if model is None else model
    before = attn_implementation(target)
    pc = enable(target, subject.tokenizer, store=store, plugins=subject.options.plugins,
                **{**subject.options.engine_config, **config})
    try:
        yield pc
    finally:
        pc.disable()
    after = attn_implementation(target)
    if after != before:
        raise RuntimeError(f"disable() left attention implementation {after!r}, was {before!r}")


def compare_generations(got: Generation, want: Generation, tol: float,
                        what: str) -> tuple[float, str]:
    """``(max|dlogits|, problem)``: the problem is empty when the greedy tokens are equal and the
    first-token logits agree within ``tol``."""
    if got.first_logits is None or want.first_logits is None:
        return float("inf"), f"{what}: no first-token logits were returned"
    diff = float((got.first_logits - want.first_logits).abs().max())
    if got.prompt_ids != want.prompt_ids:
        return diff, f"{what}: prompt token ids differ from the baseline's"
    if diff != diff or diff > tol:  # NaN counts as a failure
        return diff, (f"{what}: first-token logits differ from the baseline by {diff:.3g} "
                      f"(tolerance {tol:.3g})")
    if got.token_ids != want.token_ids:
        at = next((i for i, (a, b) in enumerate(zip(got.token_ids, want.token_ids, strict=False))
                   if a != b), min(len(got.token_ids), len(want.token_ids)))
        return diff, (f"{what}: greedy tokens diverge from the baseline at new token {at} "
                      f"({got.token_ids} vs {want.token_ids})")
    return diff, ""
