"""Answer-quality metrics shared by the benchmarks."""

from __future__ import annotations

import re

import torch

__all__ = ["rouge_l", "kl_and_top1"]

_WORD = re.compile(r"\w+")


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 over lower-cased word tokens (longest common subsequence)."""
    a = _WORD.findall(candidate.lower())
    b = _WORD.findall(reference.lower())
    if not a or not b:
        return float(a == b)
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, start=1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    p, r = lcs / len(a), lcs / len(b)
    return 2 * p * r / (p + r)


def kl_and_top1(reference_logits: torch.Tensor, logits: torch.Tensor) -> tuple[float, float]:
    """Mean KL(reference || candidate) and top-1 agreement over positions ``[n, vocab]``."""
    ref = torch.log_softmax(reference_logits.float(), dim=-1)
    cand = torch.log_softmax(logits.float(), dim=-1)
    kl = (ref.exp() * (ref - cand)).sum(-1).mean().item()
    top1 = (ref.argmax(-1) == cand.argmax(-1)).float().mean().item()
    return kl, top1
