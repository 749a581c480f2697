"""A kept chunk names its document, position and metadata as the rows have them now, in every
bank on the store: a document given again with new metadata, a paragraph passed to another holder."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from percache_plugin.rag.knowledge import KnowledgeBank
from tests.rag.test_knowledge import _bank

SHARED = "Quarterly figures are due on the tenth."


def _labels(bank: KnowledgeBank, text: str) -> tuple[str, int, dict[str, str]]:
    chunk = next(c for c in bank.chunks() if c.text == text)
    return chunk.doc_id, chunk.index, dict(chunk.metadata)


def test_a_document_given_again_with_new_metadata_carries_it(tmp_path: Path) -> None:
    bank, other = _bank(tmp_path / "kb"), _bank(tmp_path / "kb")
    text = "The rehearsal is on Friday."
    bank.add_documents([{"text": text, "id": "ana", "metadata": {"source": "mail"}}])
    assert _labels(other, text) == ("ana", 0, {"source": "mail"})  # loaded in the other bank
    report = bank.add_documents([{"text": text, "id": "ana", "metadata": {"source": "calendar"}}])
    for b in (bank, other):
        assert _labels(b, text) == ("ana", 0, {"source": "calendar"})
    assert report.new_chunks == () and report.relabelled_chunks == (bank.chunks()[0].id,)
    bank.close()
    other.close()
    reopened = _bank(tmp_path / "kb")  # from the index snapshot and the rows
    assert _labels(reopened, text) == ("ana", 0, {"source": "calendar"})
    again = reopened.add_documents([{"text": text, "id": "ana", "metadata": {"source": "calendar"}}])
    assert again.relabelled_chunks == ()
    reopened.close()


def test_a_paragraph_passed_on_names_its_new_holder_in_every_bank(tmp_path: Path) -> None:
    bank = _bank(tmp_path / "kb", chunk_words=5)
    bank.add_documents([{"text": f"Ana's note. {SHARED}", "id": "ana"},
                        {"text": f"Ben's note. {SHARED}", "id": "ben"}])
    other = _bank(tmp_path / "kb", chunk_words=5)
    assert _labels(other, SHARED)[0] == "ana"
    report = bank.add_documents([{"text": "Ana's note.", "id": "ana"}])  # no new chunk
    for b in (bank, other):
        assert _labels(b, SHARED)[0] == "ben"
    assert report.new_chunks == () and len(report.relabelled_chunks) == 1
    bank.close()
    other.close()
    reopened = _bank(tmp_path / "kb", chunk_words=5)
    assert _labels(reopened, SHARED)[0] == "ben"
    reopened.close()


def test_a_paragraph_passed_on_takes_its_new_holders_position_and_metadata(tmp_path: Path) -> None:
    ana = {"text": f"{SHARED} Ana's note.", "id": "ana", "metadata": {"from": "ana"}}
    ben = {"text": f"Ben's note. {SHARED}", "id": "ben", "metadata": {"from": "ben"}}
    ana_again = {"text": "Ana's note.", "id": "ana", "metadata": {"from": "ana"}}
    bank = _bank(tmp_path / "kb", chunk_words=5)
    bank.add_documents([ana, ben])
    assert _labels(bank, SHARED) == ("ana", 0, {"from": "ana"})
    bank.add_documents([ana_again])
    fresh = _bank(None, chunk_words=5)
    fresh.add_documents([ben, ana_again])
    assert _labels(bank, SHARED) == _labels(fresh, SHARED) == ("ben", 1, {"from": "ben"})
    bank.close()
    fresh.close()


def test_a_bank_written_before_labels_were_tracked_opens_and_passes_paragraphs_on(tmp_path: Path) -> None:
    bank = _bank(tmp_path / "kb", chunk_words=5)
    bank.add_documents([{"text": f"Ana's note. {SHARED}", "id": "ana"},
                        {"text": f"Ben's note. {SHARED}", "id": "ben"}])
    bank.close()
    db = sqlite3.connect(tmp_path / "kb" / "knowledge.sqlite3")
    db.execute("ALTER TABLE kb_members DROP COLUMN metadata")
    db.execute("ALTER TABLE kb_members DROP COLUMN idx")
    db.execute("ALTER TABLE kb_chunks DROP COLUMN relabelled")
    db.commit()
    db.close()
    bank = _bank(tmp_path / "kb", chunk_words=5)
    bank.add_documents([{"text": "Ana's note.", "id": "ana"}])
    assert _labels(bank, SHARED) == ("ben", 1, {})  # the position the row had
    bank.close()
