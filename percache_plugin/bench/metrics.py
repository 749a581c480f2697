"""Answer-quality metrics shared by the benchmarks."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch

__all__ = ["rouge_l", "kl_and_top1"]


@lru_cache(maxsize=1)
def _scorer() -> Any:
    try:
        from rouge_score import rouge_scorer
    except ImportError as exc:
        raise ImportError("ROUGE-L needs the rouge-score package: pip install 'percache-plugin[bench]' "
                          "(or pip install rouge-score)") from exc
    return rouge_scorer.RougeScorer(["rougeL"])


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 (the ``rouge-score`` package: lower-cased alphanumeric tokens, longest common
    subsequence). Two texts without any token score 1.0 (they agree), one empty 0.0."""
    score = _scorer().score(reference, candidate)["rougeL"]
    if score.fmeasure == 0.0 and not any(ch.isalnum() for ch in candidate + reference):
        return 1.0
    return float(score.fmeasure)


def kl_and_top1(reference_logits: torch.Tensor, logits: torch.Tensor) -> tuple[float, float]:
    """Mean KL(reference || candidate) and top-1 agreement over positions ``[n, vocab]``."""
    ref = torch.log_softmax(reference_logits.float(), dim=-1)
    cand = torch.log_softmax(logits.float(), dim=-1)
    kl = (ref.exp() * (ref - cand)).sum(-1).mean().item()
    top1 = (ref.argmax(-1) == cand.argmax(-1)).float().mean().item()
    return kl, top1
