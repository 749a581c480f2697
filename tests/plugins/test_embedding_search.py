"""The optional embedding search serves a plain prompt from the exact prefix of an earlier
chunk-path prompt, which the block index cannot find, and adds nothing over plain-prompt blocks."""

from __future__ import annotations

import pytest

import percache_plugin as percache
from percache_plugin.plugins.embedding_search import EmbeddingSearch, common_prefix
from tests.helpers import SEGMENTS, baseline, tiny_pair

GEN = {"max_new_tokens": 4, "do_sample": False}


def _enable(search: EmbeddingSearch | None, family: str = "llama") -> tuple[object, object, object]:
    model, tok = tiny_pair(family, chat_template=False)
    plugins = [search] if search is not None else []
    return model, tok, percache.enable(model, tok, plugins=plugins, prefix_block_tokens=16)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_a_plain_prompt_reuses_an_earlier_chunk_path_prefix_exactly(family: str) -> None:
    search = EmbeddingSearch("hash")
    model, tok, pc = _enable(search, family)
    first = pc.generate(SEGMENTS, **GEN)  # type: ignore[attr-defined]
    shared = first.prompt_ids[:-len(tok(SEGMENTS[-1], add_special_tokens=False)["input_ids"])]
    ids = shared + list(tok("Who owns the slides?", add_special_tokens=False)["input_ids"])
    gen = pc.complete(ids, **GEN)  # type: ignore[attr-defined]
    pieces = pc.prompt(SEGMENTS).reusable  # type: ignore[attr-defined]
    assert gen.stats.tokens_reused == pieces[-1].end == len(shared)
    assert search.stats()["found"] == 1 and search.stats()["extra_tokens"] == len(shared)
    with pc.disabled():  # type: ignore[attr-defined]
        want, logits = baseline(model, ids, 4)
    assert gen.token_ids == want and (gen.first_logits - logits).abs().max().item() <= 1e-4
    # Without the plugin the block index finds nothing of it.
    _, _, plain = _enable(None, family)
    plain.generate(SEGMENTS, **GEN)  # type: ignore[attr-defined]
    assert plain.complete(ids, **GEN).stats.tokens_reused == 0  # type: ignore[attr-defined]


def test_nothing_extra_over_plain_prompt_blocks_and_only_exact_prefixes() -> None:
    search = EmbeddingSearch("hash")
    model, tok, pc = _enable(search)
    preamble = "".join(f"Q: what is {i} plus {i}? A: {2 * i}.\n" for i in range(8))
    for q in ("Q: what is 20 plus 20? A:", "Q: what is 31 plus 31? A:", "Q: and 9 plus 9? A:"):
        pc.complete(preamble + q, **GEN)  # type: ignore[attr-defined]
    s = search.stats()
    assert s["searched"] >= 1 and s["found"] == 0 and s["extra_tokens"] == 0
    assert s["common_tokens"] >= s["index_tokens"]  # a common prefix exists; the index already serves its blocks
    # A near-identical prompt differing in its first token shares no exact prefix: nothing reused.
    other = pc.complete("X" + preamble[1:] + "Q: what is 20 plus 20? A:", **GEN)  # type: ignore[attr-defined]
    assert other.stats.tokens_reused == 0
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2 and common_prefix([], [1]) == 0
    with pytest.raises(ValueError, match="top_k"):
        EmbeddingSearch("hash", top_k=0)
