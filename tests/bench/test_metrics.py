"""Benchmark metrics: ROUGE-L through rouge-score, KL and top-1 agreement."""

from __future__ import annotations

import pytest
import torch

from percache_plugin.bench.metrics import kl_and_top1, rouge_l


def test_rouge_l() -> None:
    assert rouge_l("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(1.0)
    # LCS "the cat the mat" (4 of 6 tokens each side): F1 = 4/6
    assert rouge_l("the cat ran to the mat", "the cat sat on the mat") == pytest.approx(4 / 6)
    assert rouge_l("The Cat!", "the cat") == pytest.approx(1.0)  # case and punctuation
    assert rouge_l("", "") == 1.0 and rouge_l("", "words") == 0.0


def test_kl_and_top1() -> None:
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 3.0, 0.0]])
    kl, top1 = kl_and_top1(logits, logits)
    assert kl == pytest.approx(0.0, abs=1e-6) and top1 == 1.0
    _, top1 = kl_and_top1(logits, logits.flip(-1))
    assert top1 == 0.5
