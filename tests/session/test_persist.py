"""Sessions survive the process: kill -9 mid-conversation, resume with no history recomputed."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import percache_plugin as percache
from tests.helpers import baseline, tiny_pair

MESSAGES = ["Hello there.", "What is on Friday?", "And on Monday?", "Who brings the projector?",
            "Thanks, bye."]
GEN = {"max_new_tokens": 4}

CHILD = textwrap.dedent("""
    import os, signal, sys
    import percache_plugin as percache
    from tests.helpers import tiny_pair
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=sys.argv[1])
    pc.sessions.create("s", system="Be brief.")
    for msg in {messages!r}[:3]:
        pc.chat(msg, session="s", max_new_tokens=4)
    os.kill(os.getpid(), signal.SIGKILL)  # mid-conversation, no close()
""")


def _uninterrupted(family: str = "llama") -> list[percache.Reply]:
    model, tok = tiny_pair(family)
    pc = percache.enable(model, tok)
    pc.sessions.create("s", system="Be brief.")
    return [pc.chat(m, session="s", **GEN) for m in MESSAGES]


def test_kill_9_then_resume_recomputes_no_history(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    proc = subprocess.run([sys.executable, "-c", CHILD.format(messages=MESSAGES), str(store)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    want = _uninterrupted()

    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=store)
    assert "s" in pc.sessions.names()
    for i, msg in enumerate(MESSAGES[3:], start=3):
        reply = pc.chat(msg, session="s", **GEN)
        assert reply.token_ids == want[i].token_ids and reply.prompt_ids == want[i].prompt_ids
        assert (reply.first_logits - want[i].first_logits).abs().max().item() <= 1e-4
        assert reply.stats.history_recomputed == 0
        assert reply.stats.tokens_computed == want[i].stats.tokens_computed
    first = pc.sessions.get("s")
    assert [t.turn_id for t in first.turns] == [1, 2, 3, 4, 5]
    pc.close()


def _corrupt(store: Path, how: str) -> None:
    files = sorted(store.rglob("sessions/*/*.safetensors"))
    assert files
    if how == "missing":
        files[0].unlink()
    else:
        data = bytearray(files[-1].read_bytes())
        data[-8] ^= 0xFF
        files[-1].write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["missing", "flipped"])
def test_corrupt_snapshot_falls_back_to_reprefilling_the_ids(tmp_path: Path, how: str,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    store = tmp_path / "store"
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=store, session_blocks=False)  # the blocks path: tests/session/test_blocks.py
    pc.sessions.create("s", system="Be brief.")
    for msg in MESSAGES[:3]:
        pc.chat(msg, session="s", **GEN)
    pc.close()
    _corrupt(store, how)
    want = _uninterrupted()
    pc = percache.enable(model, tok, store=store, session_blocks=False)  # the blocks path: tests/session/test_blocks.py
    with caplog.at_level(logging.WARNING, logger="percache"):
        reply = pc.chat(MESSAGES[3], session="s", **GEN)
    assert any("no usable K/V snapshot" in r.getMessage() for r in caplog.records)
    assert reply.stats.restored_from == "ids" and reply.stats.tokens_reused == 0
    assert reply.stats.history_recomputed == reply.stats.history_tokens > 0
    assert reply.token_ids == want[3].token_ids and reply.prompt_ids == want[3].prompt_ids
    # The next turn is served from the re-filled cache again, and saved whole.
    assert pc.chat(MESSAGES[4], session="s", **GEN).stats.history_recomputed == 0
    pc.close()
    pc = percache.enable(model, tok, store=store, session_blocks=False)  # the blocks path: tests/session/test_blocks.py
    assert pc.chat("More?", session="s", **GEN).stats.restored_from == "snapshot"


def test_eviction_and_reset_persist(tmp_path: Path) -> None:
    store = tmp_path / "store"
    model, tok = tiny_pair("qwen2")
    pc = percache.enable(model, tok, store=store, session_kv_tokens=120)
    for i in range(6):
        pc.chat(f"Message {i} about item {i * 3}.", **GEN)
    ids = pc.sessions.get("default").ids
    pc.close()
    pc = percache.enable(model, tok, store=store, session_kv_tokens=120)
    session = pc.sessions.get("default")
    assert session.ids == ids and session.restored == "snapshot"
    reply = pc.chat("One more.", **GEN)
    with pc.disabled():
        assert reply.token_ids == baseline(model, reply.prompt_ids, 4)[0]
    pc.sessions.reset("default")
    pc.close()
    pc = percache.enable(model, tok, store=store)
    assert pc.sessions.get("default").turns == []
    with pytest.raises(percache.UnknownSession):
        pc.chat("hi", session="gone")


def test_masked_turns_leave_when_the_snapshot_is_lost(tmp_path: Path) -> None:
    """Without its slots a masked turn cannot stay excluded: it leaves the conversation (as
    compaction does) instead of silently being attended again and never counted."""
    store = tmp_path / "store"
    model, tok = tiny_pair("llama")
    config = {"session_kv_tokens": 120, "session_eviction": "masked"}
    pc = percache.enable(model, tok, store=store, **config)
    for i in range(6):
        pc.chat(f"Message {i} about item {i * 3}.", **GEN)
    masked = [t.turn_id for t in pc.sessions.get("default").turns if t.masked]
    assert masked
    pc.close()
    _corrupt(store, "missing")
    pc = percache.enable(model, tok, store=store, **config)
    session = pc.sessions.get("default")
    assert session.restored == "ids"
    assert not {t.turn_id for t in session.turns} & set(masked)
    reply = pc.chat("One more.", **GEN)
    with pc.disabled():
        assert reply.token_ids == baseline(model, reply.prompt_ids, 4)[0]
    pc.close()


def test_a_compacted_session_resumes_as_it_was_compacted(tmp_path: Path) -> None:
    # compaction changes the turn rows and every slot from the first masked turn on: the next
    # save must rewrite them, or a handle resuming the session gets the masked turns back and
    # K/V sliced from the compacted cache at positions that now hold other ids
    store = tmp_path / "store"
    model, tok = tiny_pair("llama")
    config = {"session_kv_tokens": 150, "session_low_water": 0.3, "session_eviction": "masked"}
    pc = percache.enable(model, tok, store=store, **config)
    for i in range(6):
        pc.chat(f"Message {i}.", **GEN)
    assert any(t.masked for t in pc.sessions.get("default").turns)
    assert pc.sessions.compact("default") > 0
    pc.configure(session_kv_tokens=None)  # no eviction rewrites the rows meanwhile
    for i in range(3):
        assert not pc.chat(f"After {i}.", **GEN).stats.turns_evicted
    ids = pc.sessions.get("default").ids
    pc.close()
    pc = percache.enable(model, tok, store=store)
    session = pc.sessions.get("default")
    assert session.ids == ids and not any(t.masked for t in session.turns)
    reply = pc.chat("One more.", **GEN)
    assert not reply.stats.approximate
    with pc.disabled():
        assert reply.token_ids == baseline(model, reply.prompt_ids, 4)[0]
    pc.close()


def test_a_pin_is_stored_with_the_next_turn(tmp_path: Path) -> None:
    # a handle resuming the session kept evicting the pinned turn: its replies then differed
    # from those of the handle that pinned it
    model, tok = tiny_pair("llama")
    config = {"session_kv_tokens": 120}

    def run(store: Path, reopen: bool) -> list[int]:
        pc = percache.enable(model, tok, store=store, **config)
        pc.chat(MESSAGES[0], **GEN)
        pc.sessions.pin("default", 1)
        pc.chat(MESSAGES[1], **GEN)
        if reopen:
            pc.close()
            pc = percache.enable(model, tok, store=store, **config)
            assert [t.turn_id for t in pc.sessions.get("default").turns if t.pinned] == [1]
        replies = [pc.chat(m, **GEN) for m in MESSAGES[2:]]
        assert pc.sessions.get("default").evicted_turns and pc.sessions.get("default").turns[0].turn_id == 1
        pc.close()
        return replies[-1].prompt_ids

    assert run(tmp_path / "reopened", True) == run(tmp_path / "continued", False)
