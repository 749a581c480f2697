"""Delete means delete, for conversations: once ``pc.sessions.delete`` returns, no file of the
store holds the session's text (its rows, WAL frames, turn log, queued extraction, facts drawn
from it alone), and a new handle cannot resume it."""

from __future__ import annotations

from pathlib import Path

import percache_plugin as percache
from tests.assistant.test_removal_traces import files_holding
from tests.helpers import tiny_pair

SECRET = "Zorblax: my quartz locker code is 4417 every second Tuesday."
NEEDLES = [b"zorblax", b"4417"]
GEN = {"max_new_tokens": 4}
DANA = "Dana waters the office plants every Friday morning."
EVE = ("Eve walks the two dogs along the river every evening after work, then cooks dinner for "
       "the whole family, reads the news, answers her mail and calls her sister in Lisbon")


def _pc(store: Path) -> percache.PerCache:
    model, tok = tiny_pair("llama")
    return percache.enable(model, tok, store=store, embedder="hash", predict="off", kv_warm=False,
                           memory_extraction="raw", prediction_quiet_s=0.0)


def test_a_deleted_session_leaves_no_text_in_the_store(tmp_path: Path) -> None:
    pc = _pc(tmp_path)
    pc.sessions.create("s", system="You keep the Zorblax records.")
    pc.memory.add(EVE, metadata={"source": "default:1"})
    pc.chat(SECRET, "s", **GEN)
    pc.chat("Something else, about Ben and the Monday budget.", **GEN)
    pc.idle()  # the turns' raw facts are stored
    pc.chat("Repeat the zorblax code to me please.", "s", **GEN)  # its extraction still queued
    kept = pc.memory.add("Ben reviews the budget on Monday.", metadata={"source": "s:1,default:1"})
    by_hand = pc.memory.add("Carl likes the projector in room 4.")
    twice = pc.memory.add(DANA, metadata={"source": "s:2"})  # stated in "default" after
    assert pc.memory.add(DANA, metadata={"source": "default:1"}).status == "duplicate"
    reworded = pc.memory.add(EVE + " zorblax", metadata={"source": "s:1"})  # a re-add: its history
    assert reworded.status == "near_duplicate" and reworded.fact.metadata["source"] == "default:1"
    assert any(f.metadata.get("source") == "s:1" for f in pc.memory.list())
    assert files_holding(tmp_path, NEEDLES)
    pc.sessions.delete("s")
    assert files_holding(tmp_path, NEEDLES) == []  # the handle still open
    pc.idle()  # nothing queued from the deleted turns runs now
    sources = {f.metadata.get("source") for f in pc.memory.list(superseded=True)}
    assert sources == {"default:1", "s:1,default:1", "s:2", None}  # stated elsewhere too, or by hand
    assert {kept.fact.id, by_hand.fact.id, twice.fact.id} <= {f.id for f in pc.memory.list()}
    assert [e.event for e in pc.memory.history(reworded.fact.id)] == ["added"]
    assert files_holding(tmp_path, NEEDLES) == []
    pc.close()
    assert files_holding(tmp_path, NEEDLES) == []
    pc = _pc(tmp_path)
    assert "s" not in pc.sessions.names() and "s" not in {i.name for i in pc.sessions.list()}
    assert {r.session for r in pc.turn_log.records()} == {"default"}
    pc.sessions.create("s")  # the name is free; nothing of the old conversation comes back
    assert pc.chat("Hello.", "s", **GEN).stats.history_tokens == len(pc.sessions.get("s").head_ids)
    pc.close()


def test_a_slice_no_row_names_goes_with_its_session(tmp_path: Path) -> None:
    """A save that wrote its K/V slice and then failed (its transaction, a crash) leaves a file
    no row names; deleting the session deletes it too."""
    pc = _pc(tmp_path)
    pc.sessions.create("s")
    pc.chat(SECRET, "s", **GEN)
    (written,) = list((tmp_path / "sessions").rglob("*.safetensors"))
    orphan = written.with_name(written.name.rsplit("-", 2)[0] + "-9000-9100.safetensors")
    orphan.write_bytes(written.read_bytes())
    pc.sessions.delete("s")
    assert not orphan.exists() and not written.exists()
    pc.close()


class _DeleteDuringRequest:
    """Deletes a session when the first request after registering ends (an extraction's)."""

    def __init__(self, pc: percache.PerCache, name: str) -> None:
        self.pc, self.name, self.deleted = pc, name, False

    @percache.hookimpl
    def percache_request_end(self, ctx: object, prompt: object, stats: object, generation: object) -> None:
        if not self.deleted:
            self.deleted = True
            self.pc.sessions.delete(self.name)


def test_an_extraction_running_when_its_session_is_deleted_stores_nothing(tmp_path: Path) -> None:
    pc = _pc(tmp_path)
    pc.configure(memory_extraction="both")  # the model runs, then the raw turn would be stored
    pc.sessions.create("s")
    pc.chat(SECRET, "s", **GEN)
    deleting = _DeleteDuringRequest(pc, "s")
    pc.plugins.register(deleting)
    pc.idle()
    assert deleting.deleted and "s" not in pc.sessions.names()
    assert not [f for f in pc.memory.list(superseded=True) if f.metadata.get("source", "").startswith("s:")]
    assert files_holding(tmp_path, NEEDLES) == []
    pc.close()
