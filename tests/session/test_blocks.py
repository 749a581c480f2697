"""Sessions and plain prompts serve each other through prefix blocks, exactly."""

from __future__ import annotations

from pathlib import Path

import pytest

import percache_plugin as percache
from tests.helpers import baseline, tiny_pair
from tests.models import TINY_FAMILIES

MESSAGES = ["Hi there, what is planned?", "What is on Friday?", "And Monday?", "Who brings the projector?"]
BLOCK = 16


def _exact(pc: object, model: object, ids: list[int], got_ids: list[int], got_logits: object, n: int) -> None:
    with pc.disabled():  # type: ignore[attr-defined]
        want, logits = baseline(model, ids, n)
    assert got_ids == want
    assert got_logits is not None and (got_logits - logits).abs().max().item() <= 1e-4  # type: ignore[operator]


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_complete_reuses_session_blocks_and_a_new_session_reuses_them(family: str) -> None:
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok, prefix_block_tokens=BLOCK)
    pc.sessions.create("a", system="Be brief.")
    for msg in MESSAGES:
        reply = pc.chat(msg, session="a", max_new_tokens=3, do_sample=False)
    assert reply.stats.blocks_published > 0
    a = pc.sessions.get("a")
    conversation = a.ids
    # A plain prompt that starts with the conversation reuses every full block of it.
    prompt = conversation + list(tok("Summarise.", add_special_tokens=False)["input_ids"])
    gen = pc.complete(prompt, max_new_tokens=3, do_sample=False)
    assert gen.stats.tokens_reused == len(conversation) // BLOCK * BLOCK
    _exact(pc, model, prompt, gen.token_ids, gen.first_logits, 3)
    # A new session with the same system prompt and messages: its cache comes from the blocks.
    pc.sessions.create("b", system="Be brief.")
    replies = [pc.chat(msg, session="b", max_new_tokens=3, do_sample=False) for msg in MESSAGES]
    first = replies[0]
    assert first.stats.blocks_reused > 0
    assert first.stats.tokens_reused == (len(first.prompt_ids) - 1) // BLOCK * BLOCK
    for r in replies:
        _exact(pc, model, r.prompt_ids, r.token_ids, r.first_logits, 3)
    assert pc.sessions.get("b").ids == conversation
    pc.close()


def test_a_plain_prompt_seeds_a_new_session() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, prefix_block_tokens=BLOCK)
    layout = pc.sessions.layout
    head, glue = layout.head("Be brief.")
    ids = head + layout.turn(MESSAGES[0], glue)
    pc.complete(ids + [65] * 20, max_new_tokens=1)  # stores every full block of ids and more
    pc.sessions.create("s", system="Be brief.")
    reply = pc.chat(MESSAGES[0], session="s", max_new_tokens=3, do_sample=False)
    assert reply.prompt_ids == ids
    assert reply.stats.tokens_reused == (len(ids) - 1) // BLOCK * BLOCK > 0
    _exact(pc, model, ids, reply.token_ids, reply.first_logits, 3)
    pc.close()


@pytest.mark.parametrize("mode", ["shifted", "masked"])
def test_approximate_session_k_v_is_never_published(mode: str) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, prefix_block_tokens=BLOCK, session_kv_tokens=200,
                         session_eviction=mode)
    pc.sessions.create("s", system="Be brief.")
    approx_at = None
    for i in range(10):
        r = pc.chat(f"{MESSAGES[i % 4]} ({i})", session="s", max_new_tokens=3, do_sample=False)
        if r.stats.approximate and approx_at is None:
            approx_at = pc.sessions.get("s").approx_from
    session = pc.sessions.get("s")
    assert approx_at is not None and session.approx_from is not None
    limit = session.approx_from // BLOCK
    assert len(session.published) <= limit
    # Every stored block is exact: a plain prompt over the session's ids equals plain generate.
    gen = pc.complete(session.ids, max_new_tokens=3, do_sample=False)
    assert gen.stats.tokens_reused <= limit * BLOCK
    _exact(pc, model, session.ids, gen.token_ids, gen.first_logits, 3)
    pc.close()


def test_a_session_restored_without_snapshot_loads_its_blocks(tmp_path: Path) -> None:
    model, tok = tiny_pair("qwen2")
    pc = percache.enable(model, tok, store=tmp_path, prefix_block_tokens=BLOCK)
    for msg in MESSAGES[:3]:
        pc.chat(msg, max_new_tokens=3, do_sample=False)
    n = pc.sessions.get("default").n_tokens
    pc.close()
    for f in (tmp_path / "sessions").rglob("*.safetensors"):
        f.write_bytes(b"corrupt")
    pc = percache.enable(model, tok, store=tmp_path, prefix_block_tokens=BLOCK)
    reply = pc.chat(MESSAGES[3], max_new_tokens=3, do_sample=False)
    assert reply.stats.restored_from == "ids" and reply.stats.blocks_reused > 0
    assert reply.stats.history_recomputed == n - n // BLOCK * BLOCK
    _exact(pc, model, reply.prompt_ids, reply.token_ids, reply.first_logits, 3)
    pc.close()


def test_session_blocks_can_be_switched_off() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, prefix_block_tokens=BLOCK, session_blocks=False)
    for msg in MESSAGES:
        reply = pc.chat(msg, max_new_tokens=3)
    assert reply.stats.blocks_published == 0
    assert pc.complete(pc.sessions.get("default").ids, max_new_tokens=1).stats.tokens_reused == 0
    pc.close()


def test_blocks_another_handle_stored_rounded_are_not_loaded_into_an_exact_session(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    lossy = percache.enable(model, tok, store=tmp_path, prefix_block_tokens=BLOCK, storage_dtype="float16")
    lossy.sessions.create("a", system="Be brief.")
    for msg in MESSAGES[:2]:
        lossy.chat(msg, session="a", max_new_tokens=3, do_sample=False)
    lossy.close()
    pc = percache.enable(model, tok, store=tmp_path, prefix_block_tokens=BLOCK)
    pc.sessions.create("b", system="Be brief.")
    for msg in MESSAGES[:2]:
        reply = pc.chat(msg, session="b", max_new_tokens=3, do_sample=False)
        assert not reply.stats.approximate
        _exact(pc, model, reply.prompt_ids, reply.token_ids, reply.first_logits, 3)
    pc.sessions.create("c", system="Be brief.")  # the recomputed blocks replaced the rounded ones
    again = pc.chat(MESSAGES[0], session="c", max_new_tokens=3, do_sample=False)
    assert again.stats.blocks_reused > 0 and not again.stats.approximate
    pc.close()
