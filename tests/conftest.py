"""Shared test setup: offline, no plugin autoload, small thread count."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("PERCACHE_DISABLE_PLUGIN_AUTOLOAD", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# `from tests.models import ...` and `from tests.tokenizer import ...` from any test directory.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pytest  # noqa: E402
import torch  # noqa: E402

# Tiny models are overhead-bound: one thread is several times faster than two under load.
torch.set_num_threads(1)


def _load_smollm2() -> tuple[object, object]:
    from percache_plugin.bundled import load_smollm2

    return load_smollm2()


@pytest.fixture(scope="session")
def _smollm2_pristine() -> tuple[object, object]:
    """SmolLM2 read from its GGUF once per test session (about 20 s); never handed out."""
    return _load_smollm2()


@pytest.fixture
def smollm2(_smollm2_pristine: tuple[object, object]) -> tuple[object, object]:
    """A fresh SmolLM2 model and tokenizer for one test: copies of the session's pristine load,
    so a test that wraps or edits the model (peft adapters, enable()) affects no other test."""
    model, tok = _smollm2_pristine
    return copy.deepcopy(model), copy.deepcopy(tok)
