"""Store administration: info, list, remove a document, purge other fingerprints, clear."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import percache_plugin as percache
from percache_plugin.admin import StoreAdmin, StoreInUseError
from percache_plugin.cli import main
from percache_plugin.kv.store import ChunkKV, KVStore
from tests.helpers import tiny_pair

DOCS = [
    {"id": "ana", "text": "Ana: the choir rehearsal moved to Friday at 6 pm in the small hall."},
    {"id": "ben", "text": "Ben: the budget review is on Monday; travel costs are over plan."},
]


# clear() keeps the two empty lock files: a store opening meanwhile already holds them
LOCK_FILES = ["kv", "kv/.lock", "kv/.write.lock"]


def _left_after_clear(store: Path) -> list[str]:
    left = sorted(p.relative_to(store).as_posix() for p in store.rglob("*"))
    assert all((store / name).stat().st_size == 0 for name in left if name != "kv")
    return left


def _filled(store: Path) -> None:
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=store, embedder="hash", answer_grounding=False, predict="off")
    pc.add_documents(DOCS, scope="me")
    pc.ask("When is the choir rehearsal?", scope="me", max_new_tokens=3)
    pc.ask("When is the choir rehearsal?", scope="me", max_new_tokens=3)  # a QA-bank hit
    pc.disable()


def test_info_counts_sizes_entries_hits_and_fingerprints(tmp_path: Path) -> None:
    _filled(tmp_path)
    with StoreAdmin(tmp_path) as admin:
        info = admin.info()
    assert info.documents == 2 and info.chunks == 2
    assert info.qa_entries == 1 and info.qa_hits == 1 and info.qa_answered == 1
    assert len(info.fingerprints) == 1 and info.fingerprints[0].nodes >= 3
    assert info.bytes_kv > 0 and info.bytes_knowledge > 0 and info.bytes_database > 0
    assert info.fingerprints[0].bytes_per_token > 0
    assert "QA bank: 1 entries" in info.summary()


def test_remove_document_takes_its_chunks_kv_and_qa_entries(tmp_path: Path) -> None:
    _filled(tmp_path)
    with StoreAdmin(tmp_path) as admin:
        docs = {d.doc_id: d for d in admin.documents()}
        assert docs["ana"].qa_entries == 1
        fp = admin.fingerprints()[0]
        before = len(admin.kv_store(fp).nodes())
        report = admin.remove_document("ana")
        assert report.chunks == 1 and report.qa_entries == 1 and report.kv_nodes >= 1
        assert [d.doc_id for d in admin.documents()] == ["ben"]
        assert admin.qa_entries() == []
        assert len(admin.kv_store(fp).nodes()) == before - report.kv_nodes
        with pytest.raises(KeyError, match="no document 'nobody'"):
            admin.remove_document("nobody")
    # A handle reopened on the store no longer retrieves the removed document.
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, embedder="hash", answer_grounding=False, predict="off")
    assert {c.doc_id for c in pc.knowledge.chunks()} == {"ben"}
    pc.disable()


def test_purge_keeps_one_fingerprint(tmp_path: Path) -> None:
    _filled(tmp_path)
    with StoreAdmin(tmp_path) as admin:
        mine = admin.fingerprints()[0]
    other = KVStore(tmp_path, fingerprint="another-model")
    donor = KVStore(tmp_path, fingerprint=mine)
    root = donor.children(None)[0]
    kv = donor.get(root.key)
    assert kv is not None
    other.put("k1", kv, parent=None, start=0, token_ids=list(range(kv.n_tokens)))
    other.close()
    donor.close()
    with StoreAdmin(tmp_path) as admin:
        assert sorted(admin.fingerprints()) == sorted([mine, "another-model"])
        assert admin.purge(keep=mine[:12]) == 1
        assert admin.fingerprints() == [mine]


def test_clear_empties_the_store(tmp_path: Path) -> None:
    _filled(tmp_path)
    with StoreAdmin(tmp_path) as admin:
        admin.clear()
    assert _left_after_clear(tmp_path) == LOCK_FILES


def test_clear_removes_persona_heads_and_the_turn_log(tmp_path: Path) -> None:
    _filled(tmp_path)
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=tmp_path, embedder="hash", predict="off")
    pc.personas.add("brief", "Be brief.")
    pc.chat("Hello.", persona="brief", max_new_tokens=2)
    pc.disable()
    assert (tmp_path / "personas").is_dir()
    with StoreAdmin(tmp_path) as admin:
        admin.clear()
    assert _left_after_clear(tmp_path) == LOCK_FILES


def test_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="is not a percache store"):
        StoreAdmin(tmp_path)


def test_cli_store_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _filled(tmp_path)
    assert main(["store", "info", str(tmp_path)]) == 0
    assert "QA bank: 1 entries" in capsys.readouterr().out
    assert main(["store", "list", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "ana scope=me: 1 chunks" in out and "When is the choir rehearsal?" in out
    assert main(["store", "remove", str(tmp_path), "--doc", "ana"]) == 0
    assert "1 QA entries" in capsys.readouterr().out
    assert main(["store", "purge", str(tmp_path)]) == 0
    assert main(["store", "clear", str(tmp_path), "--yes"]) == 0
    assert _left_after_clear(tmp_path) == LOCK_FILES


def _started(script: str, args: list[Path], ready: Path) -> subprocess.Popen[bytes]:
    """Another Python process running ``script`` (``{repo}`` filled in), once it made ``ready``."""
    repo = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen([sys.executable, "-c", script.format(repo=repo), *map(str, args)], cwd=repo)
    deadline = time.monotonic() + 300  # a loaded machine imports torch slowly
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "the other process did not start"
        time.sleep(0.05)
    return proc


HOLDER = """
import os, sys, time
sys.path.insert(0, {repo!r})
import percache_plugin as percache
from tests.helpers import tiny_pair
pc = percache.enable(*tiny_pair("llama"), store=sys.argv[1], embedder="hash", predict="off")
open(sys.argv[2], "w").close()
while not os.path.exists(sys.argv[3]):
    time.sleep(0.02)
pc.close()
"""


def test_remove_and_purge_are_refused_while_another_process_has_the_store_open(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    _filled(store)
    ready, done = tmp_path / "ready", tmp_path / "done"
    proc = _started(HOLDER, [store, ready, done], ready)
    try:
        with StoreAdmin(store) as admin:
            before = admin.info()
            with pytest.raises(StoreInUseError, match=r"cannot remove a document from store .* open in "
                                                      r"another process or handle"):
                admin.remove_document("ana")
            with pytest.raises(StoreInUseError, match="cannot purge store"):
                admin.purge("0000")
            after = admin.info()
        assert (after.documents, after.qa_entries, after.fingerprints[0].nodes) == (
            before.documents, before.qa_entries, before.fingerprints[0].nodes)
        assert main(["store", "remove", str(store), "--doc", "ana"]) != 0
        err = capsys.readouterr().err
        assert "open in another process or handle" in err and "Traceback" not in err
    finally:
        done.touch()
        assert proc.wait(timeout=120) == 0
    with StoreAdmin(store) as admin:  # closed: allowed again
        assert admin.remove_document("ana").documents == 1


OPENER = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, {repo!r})
from percache_plugin.kv.store import KVStore, stored_fingerprints
store, started, go, opened = sys.argv[1:5]
fp = next(iter(stored_fingerprints(Path(store))))
open(started, "w").close()
while not os.path.exists(go):
    time.sleep(0.01)
kv = KVStore(store, fingerprint=fp)  # what enable() opens first
Path(opened + ".tmp").write_text(str(len(kv.nodes())))
os.rename(opened + ".tmp", opened)
kv.close()
"""


@pytest.mark.parametrize("action", ["remove", "purge"])
def test_a_store_opened_during_remove_or_purge_waits_for_its_end(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, action: str) -> None:
    store = tmp_path / "store"
    _filled(store)
    if action == "purge":  # a second fingerprint to keep, so purge removes the first's K/V
        other = KVStore(store, fingerprint="another-model")
        other.put("k1", ChunkKV((torch.zeros(1, 2, 4),), (torch.zeros(1, 2, 4),)), parent=None,
                  start=0, token_ids=[1, 2])
        other.close()
    started, go, opened = tmp_path / "started", tmp_path / "go", tmp_path / "opened"
    proc = _started(OPENER, [store, started, go, opened], started)
    try:
        with StoreAdmin(store) as admin:
            real = admin.kv_store
            during: list[bool] = []

            def kv_store(fingerprint: str) -> KVStore:
                if not during:  # mid-operation: let the other process try to open the store
                    go.touch()
                    until = time.monotonic() + 3.0
                    while not opened.exists() and time.monotonic() < until:
                        time.sleep(0.02)
                    during.append(opened.exists())
                return real(fingerprint)

            monkeypatch.setattr(admin, "kv_store", kv_store)
            if action == "remove":
                assert admin.remove_document("ana").documents == 1
            else:
                assert admin.purge("another") > 0
            monkeypatch.undo()
            left = sum(f.nodes for f in admin.info().fingerprints)
        assert during == [False], "the store was opened while the operation ran"
        assert proc.wait(timeout=120) == 0
        assert int(opened.read_text()) == left  # it saw the store as the operation left it
    finally:
        go.touch()
        proc.wait(timeout=120)


SHARED = "The travel policy: economy class only, receipts within thirty days of the trip."


def _handle(store: Path) -> percache.PerCache:
    model, tok = tiny_pair("llama")
    return percache.enable(model, tok, store=store, embedder="hash", answer_grounding=False,
                           predict="off", chunk_words=12)


def _two_documents_sharing_a_paragraph(store: Path) -> None:
    pc = _handle(store)
    pc.add_documents([{"id": "ana", "text": "Ana: the choir meets on Friday at six.\n\n" + SHARED},
                      {"id": "ben", "text": "Ben: the budget review is on Monday.\n\n" + SHARED}])
    pc.disable()


def _chunk_texts(store: Path) -> list[str]:
    pc = _handle(store)
    texts = sorted(c.text for c in pc.knowledge.chunks())
    pc.disable()
    return texts


def test_a_paragraph_passed_on_goes_with_its_last_holder(tmp_path: Path) -> None:
    _two_documents_sharing_a_paragraph(tmp_path)
    with StoreAdmin(tmp_path) as admin:
        admin.remove_document("ana")  # stored the shared paragraph first
    with StoreAdmin(tmp_path) as admin:
        admin.remove_document("ben")  # held it too; nothing of either may be left
    assert _chunk_texts(tmp_path) == []


def test_removing_one_holder_leaves_the_shared_paragraph_to_the_other(tmp_path: Path) -> None:
    _two_documents_sharing_a_paragraph(tmp_path)
    with StoreAdmin(tmp_path) as admin:
        assert admin.remove_document("ana").chunks == 1  # its own paragraph; the shared one is Ben's too
    assert _chunk_texts(tmp_path) == sorted(["Ben: the budget review is on Monday.", SHARED])


def test_store_list_names_the_holder_a_paragraph_passed_to(tmp_path: Path) -> None:
    _two_documents_sharing_a_paragraph(tmp_path)
    pc = _handle(tmp_path)
    assert len(pc.knowledge) == 3  # loaded: the shared paragraph names Ana, who stored it first
    pc.add_documents([{"id": "ana", "text": "Ana: the choir meets on Friday at six."}])  # drops it
    pc.disable()
    with StoreAdmin(tmp_path) as admin:
        assert {d.doc_id: d.chunks for d in admin.documents()} == {"ana": 1, "ben": 2}
