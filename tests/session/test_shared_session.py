"""One session name chatted on by two handles (in one process) and by two processes.

The contract: a turn holds the session's lock in the store (released on exit or crash) and
starts from the session's latest stored state, so no turn is lost, turn ids never repeat and
no turn is served K/V of a conversation another handle has since changed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import percache_plugin as percache
from percache_plugin.session import SessionBusy
from percache_plugin.session.locks import SessionLocks
from tests.helpers import baseline, tiny_pair

REPO = Path(__file__).resolve().parents[2]
GEN = {"max_new_tokens": 3}


def _chain(replies: list[percache.Reply], final: list[int]) -> None:
    """Every turn's prompt continues the previous turn's prompt and reply; the last one is
    continued by ``final`` (the stored conversation)."""
    replies = sorted(replies, key=lambda r: r.turn_id)
    assert [r.turn_id for r in replies] == list(range(1, len(replies) + 1))
    for prev, cur in zip(replies, replies[1:], strict=False):
        assert cur.prompt_ids[:len(prev.prompt_ids)] == prev.prompt_ids, f"turn {cur.turn_id}"
        assert len(cur.prompt_ids) > len(prev.prompt_ids) + len(prev.token_ids) - 1
    assert final[:len(replies[-1].prompt_ids)] == replies[-1].prompt_ids


def test_two_handles_continue_the_same_conversation(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    a = percache.enable(model, tok, store=tmp_path, predict="off")
    b = percache.enable(*tiny_pair("llama"), store=tmp_path, predict="off")
    replies = [a.chat("Hello there.", **GEN), b.chat("What is on Friday?", **GEN),
               a.chat("And on Monday?", **GEN), a.chat("Who comes?", **GEN), b.chat("Thanks.", **GEN)]
    assert [r.turn_id for r in replies] == [1, 2, 3, 4, 5]
    assert replies[1].stats.restored_from == "snapshot"  # b read a's turn from the store
    final = b.sessions.get("default")
    _chain(replies, final.ids)
    for r in replies:  # never K/V of a conversation that changed meanwhile
        with a.disabled():
            assert r.token_ids == baseline(model, r.prompt_ids, 3)[0], f"turn {r.turn_id}"
    a.close()
    b.close()
    c = percache.enable(*tiny_pair("llama"), store=tmp_path, predict="off")
    assert [t.message for t in c.sessions.get("default").turns] == [
        "Hello there.", "What is on Friday?", "And on Monday?", "Who comes?", "Thanks."]
    c.close()


def test_reset_and_delete_in_another_handle_are_seen(tmp_path: Path) -> None:
    a = percache.enable(*tiny_pair("llama"), store=tmp_path, predict="off")
    b = percache.enable(*tiny_pair("llama"), store=tmp_path, predict="off")
    a.sessions.create("s", system="Be brief.")
    a.chat("Hello there.", session="s", **GEN)
    b.chat("What is on Friday?", session="s", **GEN)
    b.sessions.reset("s")
    r = a.chat("And on Monday?", session="s", **GEN)
    assert r.turn_id == 1 and len(a.sessions.get("s").turns) == 1
    a.sessions.delete("s")
    r = b.chat("Again.", session="s", **GEN)  # b still knows "s": it starts over, empty
    assert r.turn_id == 1
    a.close()
    b.close()


def test_a_held_session_times_out_naming_the_session_and_holder(tmp_path: Path) -> None:
    locks = SessionLocks(tmp_path)
    with locks.hold("s", 5.0):
        other = SessionLocks(tmp_path)
        t0 = time.perf_counter()
        with pytest.raises(SessionBusy, match=r"session 's' .*process \d+"):
            with other.hold("s", 0.2):
                pass
        assert time.perf_counter() - t0 < 2.0
        with other.hold("t", 0.2):  # other sessions are not held
            pass
    with SessionLocks(tmp_path).hold("s", 0.2):  # released
        pass


def test_a_turn_waits_for_the_other_handles_turn(tmp_path: Path) -> None:
    a = percache.enable(*tiny_pair("llama"), store=tmp_path, predict="off")
    b = percache.enable(*tiny_pair("llama"), store=tmp_path, predict="off")
    replies: list[percache.Reply] = []
    errors: list[BaseException] = []

    def run(pc: percache.PerCache, tag: str) -> None:
        try:
            for i in range(4):
                replies.append(pc.chat(f"{tag} message {i}.", **GEN))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(pc, tag)) for pc, tag in ((a, "a"), (b, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    a.close()
    b.close()
    c = percache.enable(*tiny_pair("llama"), store=tmp_path, predict="off")
    _chain(replies, c.sessions.get("default").ids)  # a handle's copy is refreshed by its turns
    c.close()


CHILD = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, {repo!r})
    import torch
    torch.set_num_threads(1)
    import percache_plugin as percache
    from tests.helpers import tiny_pair
    store, tag, out, turns = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    pc = percache.enable(*tiny_pair("llama"), store=store, predict="off")
    open(out + ".ready", "w").close()
    while not all(os.path.exists(p) for p in sys.argv[5:]):
        time.sleep(0.02)
    rows = []
    for i in range(turns):
        r = pc.chat(f"{{tag}} says {{i}}.", max_new_tokens=3)
        rows.append([r.turn_id, r.prompt_ids, r.token_ids])
    pc.close()
    json.dump(rows, open(out, "w"))
""")


def test_two_processes_chat_on_one_session(tmp_path: Path) -> None:
    store, turns = tmp_path / "store", 5
    outs = [tmp_path / f"{tag}.json" for tag in "ab"]
    ready = [str(o) + ".ready" for o in outs]
    procs = [subprocess.Popen([sys.executable, "-c", CHILD.format(repo=str(REPO)), str(store), tag,
                               str(out), str(turns), *ready], cwd=REPO)
             for tag, out in zip("ab", outs, strict=True)]
    for p in procs:
        assert p.wait(timeout=240) == 0
    rows = [row for o in outs for row in json.loads(o.read_text())]
    assert sorted(r[0] for r in rows) == list(range(1, 2 * turns + 1))  # no lost or repeated turn
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=store, predict="off")
    session = pc.sessions.get("default")
    assert [t.turn_id for t in session.turns] == list(range(1, 2 * turns + 1))
    rows.sort()
    for (_, prompt, _), turn in zip(rows, session.turns, strict=True):
        assert prompt[-len(turn.user_ids):] == turn.user_ids  # the stored turn is the one asked
    for prev, cur in zip(rows, rows[1:], strict=False):
        assert cur[1][:len(prev[1])] == prev[1], f"turn {cur[0]} does not continue turn {prev[0]}"
    with pc.disabled():
        for tid, prompt, out in rows:  # the answer of an uncached generation: no stale K/V
            assert out == baseline(model, prompt, 3)[0], f"turn {tid}"
    pc.close()
