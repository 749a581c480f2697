"""``percache memory list|search|forget`` on a store, without a model."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import percache_plugin as percache
from percache_plugin.cli import main
from tests.helpers import tiny_pair
from tests.memory.test_forget import _files_holding, session_holding_a_fact


def test_list_search_forget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, embedder="hash", predict="off",
                         relevance_threshold=None, memory_threshold=0.0)
    tea = pc.memory.add("Ana drinks Quillberry tea every morning", scope="ana").fact
    old = pc.memory.add("Ana lives in Lisbon", scope="ana", metadata={"subject": "home"}).fact
    pc.memory.add("Ana lives in Porto", scope="ana", metadata={"subject": "home"})
    pc.memory.add("Ben drinks coffee", scope=None)
    pc.ask("What tea does Ana drink?", scope="ana", max_new_tokens=2)
    pc.disable()

    assert main(["memory", "list", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 facts") and "Quillberry" in out and "Lisbon" not in out
    assert main(["memory", "list", str(tmp_path), "--scope", "ana", "--all"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 facts") and f"{old.id} scope=ana [superseded by" in out
    assert main(["memory", "search", str(tmp_path), "tea", "--scope", "ana", "-k", "1"]) == 0
    out = capsys.readouterr().out
    assert tea.id in out and "Ben" not in out
    assert main(["memory", "forget", str(tmp_path), tea.id]) == 0
    assert capsys.readouterr().out.startswith(f"forgot {tea.id}: ")
    assert _files_holding(tmp_path, [b"quillberry"]) == []
    assert main(["memory", "forget", str(tmp_path), "nope"]) != 0
    assert "no fact 'nope'" in capsys.readouterr().err
    assert main(["memory", "list", str(tmp_path / "missing")]) != 0


def test_forget_takes_the_fact_out_of_saved_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    model, tok = tiny_pair("llama")
    config = dict(store=tmp_path, embedder="hash", predict="off", memory_recall=True, memory_threshold=0.0,
                  memory_recall_mode="splice")
    pc = percache.enable(model, tok, **config)
    tea = pc.memory.add("Ana drinks Quillberry tea every morning", scope="ana").fact
    pc.chat("What tea does Ana drink?", memory_scope="ana", max_new_tokens=2)
    assert tea.id in [f.fact_id for f in pc.sessions.get("default").memory]
    pc.close()
    assert main(["memory", "forget", str(tmp_path), tea.id]) == 0
    assert capsys.readouterr().out.rstrip().endswith("1 sessions (0 chat turns it was recalled into)")
    pc = percache.enable(model, tok, **config)
    with caplog.at_level(logging.INFO, logger="percache"):
        session = pc.sessions.get("default")
    # the cut snapshot is not reported as a lost one
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "snapshot" in r.getMessage()]
    assert tea.id not in [f.fact_id for f in session.memory]
    assert session.cache.get_seq_length() <= len(session.head_ids)  # the snapshot ends before it
    reply = pc.chat("And now?", memory_scope="ana", max_new_tokens=2)
    assert "Quillberry" not in tok.decode(reply.prompt_ids)
    pc.close()


def test_forget_deletes_the_prefix_blocks_that_held_the_fact(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    model, tok = tiny_pair("llama")
    config = dict(store=tmp_path, embedder="hash", predict="off", memory_recall=True, memory_threshold=0.0,
                  memory_recall_mode="splice", prefix_block_tokens=8)
    held = session_holding_a_fact(model, tok, config)

    assert main(["memory", "forget", str(tmp_path), held.fact_id]) == 0
    assert capsys.readouterr().out.startswith(f"forgot {held.fact_id}: ")
    held.check_gone(tmp_path, model, tok, config)


def test_forget_is_refused_while_a_handle_has_the_store_open(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    # The handle's live session holds the fact in its region: its next save would write the
    # fact's ids back into the store after the command had forgotten it.
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, embedder="hash", predict="off", memory_recall=True,
                         memory_threshold=0.0, memory_recall_mode="splice")
    tea = pc.memory.add("Ana drinks Quillberry tea every morning", scope="ana").fact
    pc.chat("What tea does Ana drink?", memory_scope="ana", max_new_tokens=2)
    assert main(["memory", "forget", str(tmp_path), tea.id]) != 0
    err = capsys.readouterr().err
    assert "open in another process or handle" in err and "pc.memory.forget()" in err
    assert [f.id for f in pc.memory.list(scope="ana")] == [tea.id]  # nothing half done
    pc.close()
    assert main(["memory", "forget", str(tmp_path), tea.id]) == 0


def test_list_and_search_on_a_store_without_facts_find_nothing(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, embedder="hash", predict="off")
    pc.add_documents(["Ana drinks tea."])
    pc.disable()
    # before: both exited 2 saying the store "holds no memory facts", as for a broken store
    assert main(["memory", "list", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "0 facts\n"
    assert main(["memory", "search", str(tmp_path), "tea"]) == 0
    assert capsys.readouterr().out.startswith("0 facts")
    assert main(["memory", "list", str(tmp_path / "missing")]) != 0  # no store: still an error
    assert main(["memory", "forget", str(tmp_path), "nope"]) != 0
