"""``percache store remove DIR --session NAME`` deletes a conversation with no model, as
``pc.sessions.delete`` does: no file of the store holds its text after, and a new handle cannot
resume it."""

from __future__ import annotations

from pathlib import Path

import pytest

from percache_plugin.admin.store_admin import StoreInUseError
from percache_plugin.cli import main
from percache_plugin.session.sessions import UnknownSession
from tests.assistant.test_removal_traces import files_holding
from tests.session.test_delete_traces import GEN, NEEDLES, SECRET, _pc


def test_remove_session_leaves_no_text_and_nothing_to_resume(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    pc = _pc(tmp_path)
    pc.sessions.create("s", system="You keep the Zorblax records.")
    pc.chat(SECRET, "s", **GEN)
    pc.chat("Something else, about Ben and the Monday budget.", **GEN)
    pc.idle()  # the turns' raw facts are stored: one drawn from "s" alone
    pc.chat("Repeat the zorblax code to me please.", "s", **GEN)  # its extraction still queued
    kept = pc.memory.add("Carl likes the projector in room 4.")
    assert any(f.metadata.get("source", "").startswith("s:") for f in pc.memory.list())
    assert main(["store", "remove", str(tmp_path), "--session", "s"]) != 0  # the handle is open
    assert "cannot remove a session from store" in capsys.readouterr().err
    pc.close()
    assert files_holding(tmp_path, NEEDLES)
    assert main(["store", "remove", str(tmp_path), "--session", "s"]) == 0
    assert "removed session 's'" in capsys.readouterr().out
    assert files_holding(tmp_path, NEEDLES) == []
    pc = _pc(tmp_path)
    try:
        assert "s" not in pc.sessions.names() and "s" not in {i.name for i in pc.sessions.list()}
        assert {r.session for r in pc.turn_log.records()} == {"default"}
        assert kept.fact.id in {f.id for f in pc.memory.list()}
        assert not [f for f in pc.memory.list(superseded=True) if f.metadata.get("source", "").startswith("s:")]
        pc.idle()  # nothing queued from the deleted turns runs now
        assert files_holding(tmp_path, NEEDLES) == []
        with pytest.raises(UnknownSession):
            pc.sessions.get("s")
    finally:
        pc.close()


def test_remove_unknown_session_names_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pc = _pc(tmp_path)
    pc.chat("Hello.", **GEN)
    pc.close()
    assert main(["store", "remove", str(tmp_path), "--session", "nope"]) != 0
    err = capsys.readouterr().err
    assert "no session 'nope'" in err and "default" in err


def test_remove_session_is_refused_while_a_handle_has_the_store_open(tmp_path: Path) -> None:
    from percache_plugin.admin.session_delete import remove_session

    pc = _pc(tmp_path)
    try:
        pc.chat(SECRET, **GEN)
        with pytest.raises(StoreInUseError, match=r"cannot remove a session from store .*open in"):
            remove_session(tmp_path, "default")
        assert files_holding(tmp_path, NEEDLES)
    finally:
        pc.close()


def test_remove_a_session_saved_under_a_personas_weights_only(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import percache_plugin as percache
    from tests.personas.test_persona_removal import pirate_session

    model, tok, store = pirate_session(tmp_path, base_turn=True)
    needles = [b"Zorblax", b"4417"]
    assert files_holding(store, needles)
    assert main(["store", "remove", str(store), "--session", "pirate"]) == 0
    assert "removed session 'pirate'" in capsys.readouterr().out
    assert files_holding(store, needles) == []
    assert not [p for p in (store / "sessions").rglob("*.safetensors") if b"pirate" in p.read_bytes()]
    pc = percache.enable(model, tok, store=store)
    try:
        assert "pirate" not in {i.name for i in pc.sessions.list()}
        assert "default" in {i.name for i in pc.sessions.list()}
        pc.sessions.create("pirate")
        assert pc.chat("Go on.", session="pirate", persona="a", max_new_tokens=4).turn_id == 1
    finally:
        pc.close()
