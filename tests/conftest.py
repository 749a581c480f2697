"""Shared test setup: offline, no plugin autoload, small thread count."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("PERCACHE_DISABLE_PLUGIN_AUTOLOAD", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# `from tests.models import ...` and `from tests.tokenizer import ...` from any test directory.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

# Tiny models are overhead-bound: one thread is several times faster than two under load.
torch.set_num_threads(1)
