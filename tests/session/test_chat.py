"""pc.chat: carried session K/V gives exactly what plain generate gives on the whole conversation."""

from __future__ import annotations

import threading

import pytest

import percache_plugin as percache
from percache_plugin.session import MessageTooLong, UnknownSession
from tests.helpers import baseline, tiny_pair
from tests.models import TINY_FAMILIES

MESSAGES = ["Hi there.", "What is on Friday?", "And Monday?", "Thanks!", "Who brings the projector?"]


def _messages(n: int) -> list[str]:
    return [f"{MESSAGES[i % len(MESSAGES)]} ({i})" for i in range(n)]


@pytest.mark.parametrize("family", TINY_FAMILIES)
def test_twenty_turns_equal_generate_over_the_whole_conversation(family: str) -> None:
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok)
    pc.sessions.create("s", system="Be brief.")
    conversation: list[int] = []
    for i, msg in enumerate(_messages(20)):
        reply = pc.chat(msg, session="s", max_new_tokens=3, do_sample=False)
        with pc.disabled():
            want, want_logits = baseline(model, reply.prompt_ids, 3)
        assert reply.token_ids == want, f"turn {i + 1}"
        assert reply.first_logits is not None
        assert (reply.first_logits - want_logits).abs().max().item() <= 1e-4
        # The conversation only grows: earlier ids are never re-tokenized.
        assert reply.prompt_ids[:len(conversation)] == conversation
        turn_ids = pc.sessions.layout.turn(msg, None if i else pc.sessions.get("s").first_glue)
        assert reply.prompt_ids[-len(turn_ids):] == turn_ids
        if i:
            # Only the new turn and at most the previous reply's last token are computed.
            assert reply.stats.tokens_computed <= len(turn_ids) + 1
            assert reply.stats.tokens_reused == len(reply.prompt_ids) - reply.stats.tokens_computed
        conversation = reply.prompt_ids + pc.sessions.get("s").turns[-1].reply_ids
        assert reply.turn_id == i + 1
    pc.close()


def test_conversation_ids_render_as_the_template_does() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    messages: list[dict[str, str]] = [{"role": "system", "content": "Be brief."}]
    pc.sessions.create("s", system="Be brief.")
    for msg in _messages(3):
        reply = pc.chat(msg, session="s", max_new_tokens=3)
        messages.append({"role": "user", "content": msg})
        want = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        assert tok.decode(reply.prompt_ids) == want
        messages.append({"role": "assistant", "content": tok.decode(pc.sessions.get("s").turns[-1].reply_ids)})
    assert pc.sessions.layout.template_exact


def test_sessions_fork_reset_delete_and_list() -> None:
    model, tok = tiny_pair("qwen2")
    pc = percache.enable(model, tok)
    first = pc.chat("Hello.", max_new_tokens=3)
    pc.sessions.fork("default", "b")
    a = pc.chat("Tell me more.", max_new_tokens=3)
    b = pc.chat("Tell me more.", session="b", max_new_tokens=3)
    assert a.token_ids == b.token_ids and a.prompt_ids == b.prompt_ids
    assert a.stats.tokens_reused > len(first.prompt_ids) - 1
    # The branch also reuses the prefix blocks the default session published in its turn.
    assert b.stats.tokens_reused == max(a.stats.tokens_reused, (len(b.prompt_ids) - 1) // 32 * 32)
    c = pc.chat("Something else.", session="b", max_new_tokens=3)
    with pc.disabled():
        assert c.token_ids == baseline(model, c.prompt_ids, 3)[0]
    names = {i.name: i for i in pc.sessions.list()}
    assert set(names) == {"default", "b"} and names["b"].turns == 3 and names["default"].turns == 2
    pc.sessions.reset("b")
    assert pc.sessions.get("b").turns == [] and pc.sessions.list()[0].kv_tokens == 0
    again = pc.chat("Hello.", session="b", max_new_tokens=3)
    assert again.prompt_ids == first.prompt_ids and again.turn_id == 1
    pc.sessions.delete("b")
    with pytest.raises(UnknownSession, match="no session 'b'"):
        pc.chat("hi", session="b")


def test_bad_input_is_named() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, session_kv_tokens=40)
    with pytest.raises(UnknownSession, match="known: default"):
        pc.chat("hi", session="nope")
    with pytest.raises(MessageTooLong, match="session_kv_tokens=40"):
        pc.chat("x" * 60, max_new_tokens=4)
    with pytest.raises(ValueError, match="non-empty str"):
        pc.chat("")
    with pytest.raises(ValueError, match="already exists"):
        pc.sessions.create("default")
    with pytest.raises(percache.ConfigError, match="session_kv_tokens"):
        percache.Config(session_kv_tokens=0)
    # A failed turn leaves the session as it was.
    assert pc.sessions.get("default").turns == []


@pytest.mark.parametrize("extra", [{"past_key_values": None}, {"num_beams": 2},
                                   {"num_return_sequences": 2, "do_sample": True}])
def test_generate_arguments_percache_cannot_honour_are_named_in_chat(extra: dict[str, object]) -> None:
    """A chat turn passed them to model.generate as well: "got multiple values" for the ones
    percache passes itself, and a beam search over the session's batch-of-one cache."""
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    with pytest.raises(ValueError, match=f"^{next(iter(extra))}"):
        pc.chat("Hi there.", max_new_tokens=4, **extra)
    assert pc.sessions.get("default").turns == []  # the failed turn left nothing
    reply = pc.chat("Hi there.", max_new_tokens=4)
    want, _ = baseline(model, reply.prompt_ids, 4)
    assert reply.token_ids == want
    pc.close()


def test_concurrent_calls_on_one_session_are_serialised() -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok)
    replies: list[percache.Reply] = []
    threads = [threading.Thread(target=lambda m=m: replies.append(pc.chat(m, max_new_tokens=3)))
               for m in ("First.", "Second.", "Third.")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.turn_id for r in replies) == [1, 2, 3]
    ordered = sorted(replies, key=lambda r: r.turn_id)
    for prev, cur in zip(ordered, ordered[1:], strict=False):
        assert cur.prompt_ids[:len(prev.prompt_ids)] == prev.prompt_ids
    with pc.disabled():
        for r in ordered:
            assert r.token_ids == baseline(model, r.prompt_ids, 3)[0]
