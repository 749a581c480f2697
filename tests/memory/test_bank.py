"""The memory bank: add, search per scope, duplicates, conflicts, update, history, forget."""

from __future__ import annotations

from pathlib import Path

import pytest

from percache_plugin.memory.bank import AddResult, MemoryBank, UnknownFact
from percache_plugin.rag.embeddings import HashEmbedder


@pytest.fixture
def bank(tmp_path: Path) -> MemoryBank:
    b = MemoryBank(tmp_path / "percache.sqlite3", HashEmbedder())
    yield b
    b.close()


def test_search_stays_in_its_scope(bank: MemoryBank) -> None:
    bank.add("Ana plays the cello on Sundays", scope="ana")
    bank.add("Ben plays the cello on Sundays too", scope="ben")
    bank.add("The office wifi password is long", scope=None)
    hits = bank.search("who plays the cello", scope="ana", k=5)
    assert [h.fact.scope for h in hits] == ["ana"]
    assert {h.fact.scope for h in bank.search("cello", scope=None, k=5)} <= {None}
    assert bank.search("cello", scope="nobody") == []
    assert 0 < hits[0].similarity <= 1


def test_same_fact_twice_is_stored_once_and_never_deleted(bank: MemoryBank) -> None:
    first = bank.add("Ana likes green tea.", scope="ana")
    again = bank.add("ana likes GREEN tea", scope="ana")
    assert again.status == "duplicate" and again.fact.id == first.fact.id
    assert [f.id for f in bank.list("ana")] == [first.fact.id]
    assert [e.event for e in bank.history(first.fact.id)] == ["added", "readded"]
    # The same text in another scope is another fact.
    assert bank.add("Ana likes green tea.", scope="ben").status == "added"


def test_near_duplicates_by_embedding(tmp_path: Path) -> None:
    bank = MemoryBank(None, HashEmbedder(), near_duplicate=0.8)
    first = bank.add("Ana likes green tea in the morning", scope="ana")
    near = bank.add("Ana likes green tea in the morning hours", scope="ana")
    assert near.status == "near_duplicate" and near.fact.id == first.fact.id
    assert len(bank.list("ana")) == 1


def test_newer_fact_about_the_same_subject_supersedes(bank: MemoryBank) -> None:
    old = bank.add("Ana lives in Lisbon", scope="ana", metadata={"subject": "Ana home city"})
    new = bank.add("Ana moved to Porto", scope="ana", metadata={"subject": "ana  HOME city"})
    assert new.superseded == (old.fact.id,)
    assert [f.id for f in bank.list("ana")] == [new.fact.id]
    assert {f.id for f in bank.list("ana", superseded=True)} == {old.fact.id, new.fact.id}
    assert bank.get(old.fact.id).status == "superseded"
    assert bank.get(old.fact.id).superseded_by == new.fact.id
    assert [h.fact.id for h in bank.search("Lisbon", scope="ana")] == [new.fact.id]
    assert [e.event for e in bank.history(old.fact.id)] == ["added", "superseded"]
    # Re-adding the current fact changes nothing.
    assert bank.add("Ana moved to Porto", scope="ana").status == "duplicate"
    assert [f.id for f in bank.list("ana")] == [new.fact.id]


def test_update_keeps_the_old_version_in_history(bank: MemoryBank) -> None:
    fact = bank.add("The dentist is on Monday", scope="me").fact
    updated = bank.update(fact.id, "The dentist is on Tuesday")
    assert updated.text == "The dentist is on Tuesday"
    events = bank.history(fact.id)
    assert [e.event for e in events] == ["added", "updated"]
    assert events[1].text == "The dentist is on Monday"
    assert bank.search("dentist Tuesday", scope="me")[0].fact.text == "The dentist is on Tuesday"


def test_forget_leaves_a_tombstone(bank: MemoryBank) -> None:
    fact = bank.add("Secret plan: Zorblax", scope="me").fact
    bank.forget(fact.id)
    assert bank.tombstoned(fact.id)
    with pytest.raises(UnknownFact, match="forgotten"):
        bank.get(fact.id)
    with pytest.raises(UnknownFact):
        bank.history(fact.id)
    assert bank.search("Zorblax", scope="me") == []
    with pytest.raises(UnknownFact, match="no fact 'nope'"):
        bank.forget("nope")


def test_other_handles_see_changes(tmp_path: Path) -> None:
    a = MemoryBank(tmp_path / "db.sqlite3", HashEmbedder())
    b = MemoryBank(tmp_path / "db.sqlite3", HashEmbedder())
    fact = a.add("Ana collects stamps", scope="ana").fact
    assert [h.fact.id for h in b.search("stamps", scope="ana")] == [fact.id]
    b.forget(fact.id)
    assert a.search("stamps", scope="ana") == []
    a.close()
    b.close()


def test_bad_input_is_named(bank: MemoryBank) -> None:
    with pytest.raises(ValueError, match="at least one word"):
        bank.add("  ...  ")
    with pytest.raises(TypeError, match="metadata must map str to str"):
        bank.add("fine text", metadata={"n": 3})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="scope must be a str or None"):
        bank.add("fine text", scope=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty"):
        bank.search("   ")


def test_reopening_with_another_embedder_is_refused(tmp_path: Path) -> None:
    MemoryBank(tmp_path / "db.sqlite3", HashEmbedder()).add("a fact")
    with pytest.raises(ValueError, match="embedder 'hash:256', not 'hash:64'"):
        MemoryBank(tmp_path / "db.sqlite3", HashEmbedder(64))


def test_a_fact_is_searched_by_its_source_turn_but_served_alone(tmp_path: Path) -> None:
    bank = MemoryBank(tmp_path / "percache.sqlite3", HashEmbedder(), near_duplicate=0.8)
    turn = "Ana: yesterday at the harbour I finally bought the blue kayak"
    fact = bank.add("Ana owns a kayak", scope="ana", metadata={"context": turn}).fact
    plain = bank.add("Ana owns a kayak", scope="plain").fact
    # "harbour" is only in the context: found through it, and what is served is the fact.
    (hit,) = bank.search("harbour", scope="ana", k=3)
    assert hit.fact.id == fact.id and hit.fact.text == "Ana owns a kayak"
    assert all(h.fact.id != plain.id for h in bank.search("harbour", scope="plain", k=3)
               if h.similarity > 0)
    # Duplicates compare the facts' own texts: another fact of the same turn is kept.
    other = bank.add("Ana shops at the harbour", scope="ana", metadata={"context": turn})
    assert other.status == "added"
    # Reopened, the key is read back; an update without context drops it.
    again = MemoryBank(tmp_path / "percache.sqlite3", HashEmbedder(), near_duplicate=0.8)
    assert again.search("yesterday finally bought", scope="ana", k=1)[0].fact.id in (fact.id, other.fact.id)
    again.update(fact.id, "Ana owns a red kayak", metadata={})
    assert fact.id not in [h.fact.id for h in again.search("yesterday finally", scope="ana", k=5)
                           if h.similarity > 0.3]
    again.close()
    bank.close()


def test_an_update_that_gives_a_subject_supersedes_as_an_add_does(bank: MemoryBank) -> None:
    lisbon = bank.add("Ana lives in Lisbon", "ana", {"subject": "ana home"}).fact
    porto = bank.add("Ana rents a flat in Porto", "ana").fact
    seen: list[AddResult] = []
    bank.committed.append(seen.extend)
    bank.update(porto.id, "Ana moved to Porto", {"subject": "Ana home"})
    assert [(f.id, f.status) for f in bank.list("ana", superseded=True)] == [
        (lisbon.id, "superseded"), (porto.id, "active")]
    assert bank.get(lisbon.id).superseded_by == porto.id
    assert [e.event for e in bank.history(lisbon.id)] == ["added", "superseded"]
    assert seen[-1].superseded == (lisbon.id,)  # what was built on it is dropped (the plugin)
    assert [h.fact.id for h in bank.search("where does Ana live?", "ana")] == [porto.id]
    bank.update(porto.id, "Ana moved to Porto in May")  # same subject: nothing else to supersede
    assert seen[-1].superseded == ()
