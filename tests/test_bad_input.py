"""Bad input gets a clear exception naming the problem."""

from __future__ import annotations

from pathlib import Path

import pytest

import percache_plugin as percache
from tests.helpers import SEGMENTS, tiny_pair


@pytest.fixture(scope="module")
def pc() -> percache.PerCache:
    model, tok = tiny_pair("llama", max_position_embeddings=256)
    return percache.enable(model, tok)


def test_empty_segment_list(pc: percache.PerCache) -> None:
    with pytest.raises(percache.SegmentError, match="empty"):
        pc.generate([])


def test_non_string_segment(pc: percache.PerCache) -> None:
    with pytest.raises(percache.SegmentError, match="segment 1 is a int"):
        pc.generate(["system", 42, "question"])
    with pytest.raises(percache.SegmentError, match="list of str"):
        pc.generate("a bare string")  # type: ignore[arg-type]


def test_query_not_last(pc: percache.PerCache) -> None:
    with pytest.raises(percache.SegmentError, match="only the last segment"):
        pc.generate([percache.Segment("q", "query"), percache.Segment("c", "chunk")])


def test_unknown_config_key() -> None:
    model, tok = tiny_pair("llama")
    with pytest.raises(percache.ConfigError, match="unknown config key.*'kv_limit'"):
        percache.enable(model, tok, kv_limit=10)
    with pytest.raises(percache.ConfigError, match="storage_dtype"):
        percache.enable(model, tok, storage_dtype="int8")
    assert model.config._attn_implementation == "sdpa"  # nothing was switched


def test_unwritable_store_path(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises((PermissionError, ValueError, NotADirectoryError, FileExistsError), match="file"):
        percache.enable(model, tok, store=blocker / "store")


def test_prompt_longer_than_context(pc: percache.PerCache) -> None:
    with pytest.raises(ValueError, match="exceeds the model's context of 256 tokens"):
        pc.generate([SEGMENTS[0], "x" * 400, "q?"], max_new_tokens=4)


def test_not_a_model() -> None:
    with pytest.raises(TypeError, match="PreTrainedModel"):
        percache.enable(object(), None)


def test_closed_handle_refuses_requests() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    pc.close()
    with pytest.raises(RuntimeError, match="closed"):
        pc.generate(SEGMENTS)
    with pytest.raises(RuntimeError, match="closed"):
        with pc.disabled():
            pass
