from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import hnswlib
import numpy as np
import pytest

from percache_plugin.rag.chunking import Chunk, Document, chunk_document
from percache_plugin.rag.embeddings import HashEmbedder
from percache_plugin.rag.index import HybridIndex, tokenize

EMB = HashEmbedder(128)
FACTS = [
    "The choir rehearsal is on Friday at six in the church hall.",
    "Dentist appointment moved to Tuesday morning at nine.",
    "Alice's birthday party is at the lake house on Saturday.",
    "The quarterly budget review needs the sales figures by Monday.",
    "Bob recommended the Italian restaurant near the station.",
    "The car needs new winter tyres before December.",
]


def _chunks(texts: list[str], scope: str | None = None) -> list[Chunk]:
    return [c for t in texts for c in chunk_document(Document(t, scope=scope))]


def _index(chunks: list[Chunk], **kwargs: object) -> HybridIndex:
    index = HybridIndex(EMB.dim, **kwargs)  # type: ignore[arg-type]
    index.add(chunks, EMB.embed([c.text for c in chunks]))
    return index


def _search(index: HybridIndex, query: str, **kwargs: object) -> list[str]:
    hits = index.search(query, EMB.embed([query])[0], **kwargs)  # type: ignore[arg-type]
    return [index.chunk(h.chunk_id).text for h in hits]


@pytest.mark.parametrize("fusion", ["rrf", "bm25", "vector"])
def test_search_finds_the_matching_chunk(fusion: str) -> None:
    index = _index(_chunks(FACTS), fusion=fusion)
    assert _search(index, "when is the choir rehearsal", k=1) == [FACTS[0]]
    assert _search(index, "winter tyres for the car", k=2)[0] == FACTS[5]


def test_hits_report_both_ranks_and_descending_scores() -> None:
    index = _index(_chunks(FACTS))
    query = "dentist appointment Tuesday"
    hits = index.search(query, EMB.embed([query])[0], k=3)
    assert hits[0].bm25_rank == 1 and hits[0].vector_rank == 1
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    bm25_only = _index(_chunks(FACTS), fusion="bm25").search(query, EMB.embed([query])[0])
    assert bm25_only[0].vector_rank is None and bm25_only[0].bm25_rank == 1


def test_add_skips_duplicates_and_counts_new() -> None:
    chunks = _chunks(FACTS[:3])
    index = _index(chunks)
    assert len(index) == 3
    again = _chunks(FACTS[:4]) + _chunks([FACTS[3]])  # 3 known, 1 new (given twice)
    assert index.add(again, EMB.embed([c.text for c in again])) == 1
    assert len(index) == 4 and chunks[0].id in index


def test_bm25_sees_chunks_added_and_removed_after_a_search() -> None:
    index = _index(_chunks(FACTS[:3]), fusion="bm25")
    assert _search(index, "winter tyres") == []
    late = _chunks([FACTS[5]])
    index.add(late, EMB.embed([FACTS[5]]))
    assert _search(index, "winter tyres") == [FACTS[5]]
    index.remove(late[0].id)
    assert _search(index, "winter tyres") == []


def test_scope_filter_returns_only_that_scope() -> None:
    chunks = _chunks(FACTS, scope="alice") + _chunks(FACTS[:2], scope="bob")
    index = _index(chunks)
    assert len(index) == 8
    for scope, expected in (("alice", 6), ("bob", 2)):
        hits = index.search("rehearsal", EMB.embed(["rehearsal"])[0], k=10, scope=scope)
        assert len(hits) == expected
        assert {index.chunk(h.chunk_id).scope for h in hits} == {scope}
    assert index.search("rehearsal", EMB.embed(["rehearsal"])[0], scope="carol") == []
    # scope=None means unscoped chunks only, never every scope.
    assert index.search("rehearsal", EMB.embed(["rehearsal"])[0], k=20) == []
    shared = _chunks(["Shared note: the rehearsal room is booked."])
    index.add(shared, EMB.embed([shared[0].text]))
    hits = index.search("rehearsal", EMB.embed(["rehearsal"])[0], k=20)
    assert [h.chunk_id for h in hits] == [shared[0].id]


def test_remove_then_readd() -> None:
    chunks = _chunks(FACTS)
    index = _index(chunks)
    assert index.remove([chunks[0].id, "no-such-id"]) == 1
    assert index.remove(chunks[0].id) == 0
    assert len(index) == 5 and chunks[0].id not in index
    assert FACTS[0] not in _search(index, "choir rehearsal Friday", k=10)
    with pytest.raises(KeyError, match="no chunk"):
        index.chunk(chunks[0].id)
    assert index.add(chunks[:1], EMB.embed([FACTS[0]])) == 1
    assert _search(index, "choir rehearsal Friday", k=1) == [FACTS[0]]


def test_index_grows_past_its_initial_capacity() -> None:
    texts = [f"note {i} about topic{i} and item{i * 7}" for i in range(600)]
    chunks = _chunks(texts)
    index = _index(chunks)
    assert len(index) == 600
    assert _search(index, "topic599 item4193", k=1) == [texts[599]]


def test_save_load_round_trip_without_reembedding(tmp_path: Path) -> None:
    chunks = _chunks(FACTS, scope="alice") + _chunks(["Bob's own note about tyres."], scope="bob")
    index = _index(chunks, rrf_k=20, bm25_weight=0.25)
    index.remove(chunks[1].id)
    queries = ["choir rehearsal", "tyres", "birthday party lake"]
    before = {q: index.search(q, EMB.embed([q])[0], k=4) for q in queries}
    index.save(tmp_path / "idx")
    loaded = HybridIndex.load(tmp_path / "idx")
    assert (len(loaded), loaded.dim, loaded.fusion, loaded.rrf_k) == (6, 128, "rrf", 20)
    assert loaded.weights == (0.25, 1.0)
    assert loaded.chunk(chunks[0].id) == chunks[0]
    for q in queries:
        assert loaded.search(q, EMB.embed([q])[0], k=4) == before[q]
    assert [h.chunk_id for h in loaded.search("tyres", EMB.embed(["tyres"])[0], scope="bob")] == [
        chunks[-1].id
    ]
    # The loaded index keeps working: new labels do not collide with stored ones.
    extra = _chunks(["A brand new fact about piano lessons."])
    assert loaded.add(extra, EMB.embed([extra[0].text])) == 1
    assert _search(loaded, "piano lessons", k=1) == [extra[0].text]


def test_save_replaces_the_previous_generation(tmp_path: Path) -> None:
    index = _index(_chunks(FACTS[:2]))
    index.save(tmp_path)
    index.add(_chunks(FACTS[2:3]), EMB.embed([FACTS[2]]))
    index.save(tmp_path)
    names = sorted(p.name.split(".")[0] for p in tmp_path.iterdir())
    assert names == ["chunks", "embeddings", "hnsw", "manifest"]  # no stale or temp files
    assert len(HybridIndex.load(tmp_path)) == 3


def test_load_rejects_missing_or_foreign_data(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing manifest.json"):
        HybridIndex.load(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a percache-hybrid-index v1 manifest"):
        HybridIndex.load(tmp_path)


def test_fusion_keeps_a_result_both_rankers_put_first() -> None:
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(40)]
    texts = list(dict.fromkeys(" ".join(rng.choices(vocab, k=8)) for _ in range(80)))
    index = _index(_chunks(texts), rrf_k=0)  # rrf_k=0 makes rank 1 vs 2 weigh the most
    bm25 = _index(_chunks(texts), fusion="bm25")
    dense = _index(_chunks(texts), fusion="vector")
    agreed = 0
    for _ in range(60):
        query = " ".join(rng.choices(vocab, k=3))
        vector = EMB.embed([query])[0]
        top_b, top_v = bm25.search(query, vector, k=1), dense.search(query, vector, k=1)
        if top_b and top_b[0].chunk_id == top_v[0].chunk_id:
            agreed += 1
            fused = index.search(query, vector, k=1)
            assert fused[0].chunk_id == top_b[0].chunk_id
            assert (fused[0].bm25_rank, fused[0].vector_rank) == (1, 1)
    assert agreed >= 5  # the property was actually exercised


def test_rrf_weights_decide_between_disagreeing_rankers() -> None:
    chunks = _chunks(FACTS)
    # The text matches the dentist fact; the vector is the restaurant fact's own embedding.
    query, vector = "dentist appointment Tuesday", EMB.embed([FACTS[4]])[0]
    tops = {}
    for weights in ((1.0, 0.01), (0.01, 1.0)):
        index = _index(chunks, bm25_weight=weights[0], vector_weight=weights[1])
        hit = index.search(query, vector, k=1)[0]
        tops[weights] = index.chunk(hit.chunk_id).text
    assert tops == {(1.0, 0.01): FACTS[1], (0.01, 1.0): FACTS[4]}


@pytest.mark.parametrize(
    ("embeddings", "message"),
    [
        (np.zeros((1, 5)), r"shape \[n, 128\]"),
        (np.full((1, 128), np.nan), "NaN"),
        (np.zeros((1, 128)), "all-zero row"),
        (np.ones((2, 128)), "1 chunks but 2 embedding rows"),
    ],
)
def test_add_rejects_bad_embeddings(embeddings: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HybridIndex(128).add(_chunks(FACTS[:1]), embeddings)


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="fusion must be"):
        HybridIndex(8, fusion="max")  # type: ignore[arg-type]
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="bm25_weight must be a positive finite number"):
            HybridIndex(8, bm25_weight=bad)
    with pytest.raises(TypeError, match="item 0 is str"):
        HybridIndex(8).add(["text"], np.ones((1, 8)))  # type: ignore[list-item]
    index = _index(_chunks(FACTS))
    with pytest.raises(ValueError, match="k must be a positive int"):
        index.search("q", EMB.embed(["q"])[0], k=0)
    with pytest.raises(ValueError, match="one vector, got 2 rows"):
        index.search("q", EMB.embed(["q", "r"]))
    assert HybridIndex(8).search("anything", np.ones(8)) == []


def test_tokenizer_is_lowercase_words() -> None:
    assert tokenize("Grad B: it's {disfmarker} OK!") == ["grad", "b", "it", "s", "disfmarker", "ok"]


def holds_vector(data: bytes, vector: np.ndarray, tol: float = 1e-6) -> bool:
    """Whether ``data`` holds ``vector`` as float32 at any offset, to ``tol`` (hnswlib stores
    it normalized again: the last bit may differ)."""
    vector = np.asarray(vector, np.float32)
    for shift in range(4):
        floats = np.frombuffer(data[shift:shift + (len(data) - shift) // 4 * 4], np.float32)
        if len(floats) >= len(vector):
            windows = np.lib.stride_tricks.sliding_window_view(floats, len(vector))
            with np.errstate(invalid="ignore", over="ignore"):
                if np.any(np.all(np.abs(windows - vector) < tol, axis=1)):
                    return True
    return False


def test_a_removed_chunks_vector_is_in_no_snapshot_file(tmp_path: Path) -> None:
    # hnswlib's mark_deleted keeps a removed element's vector, and the HNSW file kept it until a
    # new chunk took the slot; an embedding is derived from the text, so it goes with the chunk
    chunks = _chunks(FACTS)
    index = _index(chunks)
    vector = index.vectors([chunks[0].id])[0]
    index.save(tmp_path / "before")
    assert all(holds_vector(p.read_bytes(), vector) for p in (tmp_path / "before").glob("[he]*")), \
        "the test must see the vector in the HNSW and embeddings files before"
    index.remove(chunks[0].id)
    index.save(tmp_path / "after")
    assert [p.name for p in (tmp_path / "after").iterdir() if holds_vector(p.read_bytes(), vector)] == []
    assert FACTS[0] not in _search(index, "choir rehearsal Friday", k=10)
    assert _search(index, "dentist Tuesday", k=1) == [FACTS[1]]
    assert index.add(chunks[:1], EMB.embed([FACTS[0]])) == 1  # its slot is taken again
    assert _search(index, "choir rehearsal Friday", k=1) == [FACTS[0]]


def add_removed_slot(snapshot: Path, text: str) -> np.ndarray:
    """Make ``snapshot`` what an earlier version saved after removing ``text``'s chunk: its
    HNSW slot marked deleted with the vector kept; returns that vector, as stored."""
    manifest = json.loads((snapshot / "manifest.json").read_text())
    hnsw_file = snapshot / manifest["files"]["hnsw"]["name"]
    old = hnswlib.Index(space="cosine", dim=EMB.dim)
    old.load_index(str(hnsw_file), allow_replace_deleted=True)
    old.add_items(EMB.embed([text]), [manifest["next_label"]])
    old.mark_deleted(manifest["next_label"])
    old.save_index(str(hnsw_file))
    manifest["next_label"] += 1
    manifest["files"]["hnsw"].update(size=hnsw_file.stat().st_size,
                                     sha256=hashlib.sha256(hnsw_file.read_bytes()).hexdigest())
    (snapshot / "manifest.json").write_text(json.dumps(manifest))
    vector = EMB.embed([text])[0]
    vector = vector / np.linalg.norm(vector)
    assert holds_vector(hnsw_file.read_bytes(), vector)
    return vector


def test_loading_a_snapshot_saved_before_removals_scrubbed_overwrites_their_vectors(tmp_path: Path) -> None:
    chunks = _chunks(FACTS)
    _index(chunks[1:]).save(tmp_path)
    vector = add_removed_slot(tmp_path, FACTS[0])
    index = HybridIndex.load(tmp_path)
    index.save(tmp_path / "again")
    assert not any(holds_vector(p.read_bytes(), vector) for p in (tmp_path / "again").iterdir())
    assert index.scrubbed == 1 and len(index) == 5  # the bank saves again when it is not 0
    assert HybridIndex.load(tmp_path / "again").scrubbed == 0  # already blank: nothing to do
    assert _search(index, "dentist Tuesday", k=1) == [FACTS[1]]
