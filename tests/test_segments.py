"""Segment normalisation, template splitting and tree keys."""

from __future__ import annotations

import pytest

from percache_plugin.segments import Segment, build_prompt, node_key, normalize_segments
from tests.tokenizer import byte_tokenizer


def test_plain_strings_follow_system_chunks_query() -> None:
    segs = normalize_segments(["s", "a", "b", "q"])
    assert [s.kind for s in segs] == ["system", "chunk", "chunk", "query"]
    assert [s.kind for s in normalize_segments(["q"])] == ["query"]


def test_template_split_renders_the_same_text() -> None:
    tok = byte_tokenizer(chat_template=True)
    segs = normalize_segments(["Sys.", "Chunk one.", "Chunk two.", "Q?"])
    prompt = build_prompt(segs, tok, fingerprint="fp", use_template=True, separator="\n\n")
    rendered = tok.apply_chat_template(
        [{"role": "system", "content": "Sys."},
         {"role": "user", "content": "Chunk one.\n\nChunk two.\n\nQ?"}],
        tokenize=False, add_generation_prompt=True,
    )
    assert tok.decode(prompt.input_ids) == rendered
    assert [p.key is None for p in prompt.pieces] == [False, False, False, True]
    assert prompt.pieces[1].start == prompt.pieces[0].end


def test_keys_chain_through_the_prefix() -> None:
    tok = byte_tokenizer()
    a = build_prompt(normalize_segments(["S", "A", "B", "q"]), tok, fingerprint="fp", use_template=False)
    b = build_prompt(normalize_segments(["S", "X", "B", "q"]), tok, fingerprint="fp", use_template=False)
    assert a.pieces[0].key == b.pieces[0].key
    assert a.pieces[2].key != b.pieces[2].key  # same chunk, different prefix: a different node
    assert node_key("fp", None, [1, 2]) != node_key("other", None, [1, 2])


def test_node_key_bytes_are_unchanged() -> None:
    # Stored nodes are found by these keys: the one-pass id encoding must give the bytes of
    # int(t).to_bytes(4, "little") per id, and refuse what that refuses.
    import hashlib

    import numpy as np

    ids = [0, 1, 255, 256, 49151, 2**31, 2**32 - 1]
    h = hashlib.blake2b(digest_size=16)
    h.update(b"fp")
    h.update(b"parent")
    h.update(len(ids).to_bytes(4, "little"))
    h.update(b"".join(t.to_bytes(4, "little") for t in ids))
    assert node_key("fp", "parent", ids) == h.hexdigest()
    assert node_key("fp", "parent", np.array(ids, dtype=np.int64)) == h.hexdigest()
    for bad in (-1, 2**32):
        with pytest.raises(OverflowError):
            node_key("fp", None, [1, bad])


def test_no_template_adds_bos_once() -> None:
    tok = byte_tokenizer()
    p = build_prompt([Segment("S", "system"), Segment("q", "query")], tok, fingerprint="f", use_template=False)
    assert p.input_ids[0] == tok.bos_token_id
    assert p.input_ids.count(tok.bos_token_id) == 1
