from __future__ import annotations

import re

import pytest

from percache_plugin.rag.chunking import (
    Chunk,
    Document,
    as_document,
    chunk_document,
    chunk_id,
    split_spans,
)


def _transcript(turns: int = 40) -> str:
    speakers = ["Alice", "Bob", "Hon. Mary Ng (Minister of Small Business, Lib.)"]
    return "\n".join(
        f"{speakers[i % 3]}: turn {i} " + " ".join(f"w{i}x{j}" for j in range(3 + i % 7))
        for i in range(turns)
    )


def _prose(sentences: int = 60) -> str:
    return " ".join(
        f"Sentence {i} talks about " + " ".join(f"word{i}_{j}" for j in range(4 + i % 9)) + "."
        for i in range(sentences)
    )


def test_transcript_chunks_keep_turns_whole_and_in_order() -> None:
    text = _transcript()
    chunks = chunk_document(Document(text, id="m"), target_words=30)
    lines = [line for c in chunks for line in c.text.split("\n")]
    assert lines == text.split("\n")  # every turn exactly once, never cut, in order
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(len(c.text.split()) <= 60 for c in chunks)
    assert len(chunks) > 3


def test_prose_chunks_end_on_sentence_boundaries_near_target() -> None:
    chunks = chunk_document(Document(_prose()), target_words=40)
    assert len(chunks) > 5
    assert all(c.text.endswith(".") and c.text[0].isupper() for c in chunks)
    sizes = [len(c.text.split()) for c in chunks]
    assert all(s <= 80 for s in sizes)
    assert all(20 <= s <= 60 for s in sizes[:-1])  # greedy packing lands near the target


def test_chunk_texts_are_verbatim_slices() -> None:
    text = _prose(30)
    spans = split_spans(text, target_words=25)
    assert [text[s:e] for s, e in spans] == [
        c.text for c in chunk_document(Document(text), target_words=25)
    ]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_overlong_unit_is_split_on_word_boundaries() -> None:
    words = [f"tok{i}" for i in range(250)]
    text = "Alice: short.\nBob: " + " ".join(words) + "\nAlice: bye."
    chunks = chunk_document(Document(text), target_words=50, max_words=100)
    assert all(len(c.text.split()) <= 100 for c in chunks)
    rejoined = " ".join(c.text for c in chunks).split()
    assert rejoined == text.split()  # no word lost, duplicated or cut in half


def test_unit_mode_can_be_forced() -> None:
    text = "Alice: one. two. three.\nBob: four."
    assert len(split_spans(text, target_words=1, max_words=10, units="turns")) == 2
    assert len(split_spans(text, target_words=1, max_words=10, units="sentences")) == 4


def test_chunk_ids_are_stable_and_scoped() -> None:
    # A fixed value: stored chunks (K/V files, QA bank) are keyed by it across versions.
    assert chunk_id("hello", None) == "c-48091c929795598e1ab50265"
    text = _transcript(10)
    first = chunk_document(Document(text, scope="alice"), target_words=20)
    again = chunk_document(Document(text, scope="alice"), target_words=20)
    other = chunk_document(Document(text, scope="bob"), target_words=20)
    assert [c.id for c in first] == [c.id for c in again]
    assert not {c.id for c in first} & {c.id for c in other}


def test_same_text_in_two_documents_is_one_chunk() -> None:
    a = chunk_document(Document("Shared paragraph here.", id="a", scope="s"))
    b = chunk_document(Document("Shared paragraph here.", id="b", scope="s"))
    assert a[0].id == b[0].id and a[0].doc_id != b[0].doc_id


def test_document_ids_default_to_content_hash() -> None:
    assert Document("x y z").id == Document("x y z").id
    assert Document("x y z").id != Document("x y z", scope="s").id
    assert Document("x y z", id="mine").id == "mine"


def test_bytes_are_decoded_and_bad_utf8_is_named() -> None:
    assert Document("café".encode()).text == "café"
    with pytest.raises(ValueError, match=r"document 'mail-7' is not valid UTF-8 \(byte 3"):
        Document(b"abc\xff\xfe", id="mail-7")
    with pytest.raises(ValueError, match="not valid UTF-8"):
        as_document(b"\xc3\x28")


@pytest.mark.parametrize("text", ["", "   \n\t", b""])
def test_empty_text_is_rejected(text: str | bytes) -> None:
    with pytest.raises(ValueError, match="empty text"):
        Document(text, id="d1")  # type: ignore[arg-type]


def test_as_document_accepts_the_documented_inputs() -> None:
    doc = Document("hi there", id="x")
    assert as_document(doc) is doc
    assert as_document("hi there").text == "hi there"
    mapped = as_document({"text": "hi", "id": "m", "scope": "u1", "metadata": {"from": "ann"}})
    assert (mapped.id, mapped.scope, dict(mapped.metadata)) == ("m", "u1", {"from": "ann"})
    with pytest.raises(ValueError, match=r"unknown keys \['scpoe'\]"):
        as_document({"text": "hi", "scpoe": "u1"})
    with pytest.raises(ValueError, match="needs a 'text' key"):
        as_document({"id": "m"})
    with pytest.raises(TypeError, match="cannot make a document from int"):
        as_document(3)  # type: ignore[arg-type]


def test_metadata_is_validated_and_frozen() -> None:
    source = {"k": "v"}
    doc = Document("text here", metadata=source)
    source["k"] = "changed"
    assert doc.metadata["k"] == "v"
    with pytest.raises(TypeError):
        doc.metadata["k"] = "x"  # type: ignore[index]
    with pytest.raises(TypeError, match="metadata must map str to str"):
        Document("text here", metadata={"n": 1})  # type: ignore[dict-item]
    chunk = chunk_document(doc)[0]
    assert isinstance(chunk, Chunk) and chunk.metadata == {"k": "v"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target_words": 0}, "target_words must be a positive int"),
        ({"target_words": 10, "max_words": 5}, r"max_words must be an int >= target_words \(10\)"),
        ({"units": "paragraphs"}, "units must be"),
    ],
)
def test_bad_sizes_are_rejected(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_spans("Some text.", **kwargs)  # type: ignore[arg-type]


def test_transcript_detection_ignores_prose_with_a_colon() -> None:
    text = "Note: this is prose.\nIt goes on for a while.\nAnd then some more.\nThe end."
    spans = split_spans(text, target_words=4, units="auto")
    # Sentence mode: "Note: this is prose." is its own unit, not a turn swallowing the rest.
    assert re.fullmatch(r"Note: this is prose\.", text[spans[0][0] : spans[0][1]])
