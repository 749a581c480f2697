"""The ask() pipeline: QA bank, retrieval, generation through the reuse path, idle work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import percache_plugin as percache
from tests.helpers import tiny_pair

DOCS = [
    "Ana: the choir rehearsal moved to Friday at 6 pm in the small hall.",
    "Ben: the budget review is on Monday; travel costs are over plan.",
    "Carl: I borrowed the projector and will return it on Saturday.",
]
GEN = {"max_new_tokens": 4}


def _pc(store: Path | None = None, **config: object) -> percache.PerCache:
    # answer_grounding off: a random tiny model emits stray digits, which the check would flag
    model, tok = tiny_pair("llama")
    config.setdefault("predict", "off")
    config.setdefault("background_max_new_tokens", 4)
    # draft_calibrate_idle off: these tests count the other idle tasks (tests/assistant/test_calibrate_task.py)
    return percache.enable(model, tok, draft_calibrate_idle=False, store=store, embedder="hash", answer_grounding=False, **config)


def test_miss_then_hit_then_deferred_answer() -> None:
    pc = _pc()
    pc.add_documents(DOCS, scope="alice")
    first = pc.ask("When is the choir rehearsal?", scope="alice", **GEN)
    assert first.source == "generated" and len(first.sources) == 3
    assert first.stats is not None and first.stats.nodes_stored == 4
    again = pc.ask("When is the choir rehearsal ?", scope="alice", **GEN)
    assert again.source == "qa_bank" and again.text == first.text
    assert again.matched_question == "When is the choir rehearsal?"
    # the documents queued one warm task per chunk (Config.kv_warm, on by default), the hit
    # its own answer
    assert [t.kind for t in pc.idle_queue.pending()] == ["warm"] * len(DOCS) + ["answer"]
    report = pc.idle()
    assert report.by_kind == {"warm": len(DOCS), "answer": 1}
    assert report.tasks_run == len(DOCS) + 1 and report.remaining == 0 and report.decode_tokens > 0
    assert len(pc.qa_bank.entries(scope="alice")) == 2


def test_scope_guard_blocks_other_scopes() -> None:
    pc = _pc()
    pc.add_documents(DOCS, scope="alice")
    pc.add_documents(DOCS[:1], scope="bob")
    pc.ask("When is the choir rehearsal?", scope="alice", **GEN)
    other = pc.ask("When is the choir rehearsal?", scope="bob", **GEN)
    assert other.source == "generated"
    assert other.sources and all(pc.knowledge.chunk(c).scope == "bob" for c in other.sources)


def test_kv_reused_across_questions_retrieving_the_same_chunks() -> None:
    pc = _pc(use_qa_bank=False)
    pc.add_documents(DOCS, scope="alice")
    pc.ask("When is the choir rehearsal?", scope="alice", **GEN)
    second = pc.ask("Who borrowed the projector?", scope="alice", **GEN)
    assert second.source == "generated"
    assert second.stats is not None and second.stats.tokens_reused > 0


def test_new_documents_mark_answers_stale_and_refresh_them() -> None:
    pc = _pc(top_k=2)
    pc.add_documents(DOCS[:2], scope="alice")
    pc.ask("When is the choir rehearsal?", scope="alice", **GEN)
    pc.add_documents(["Ana: correction, the choir rehearsal is on Thursday now."], scope="alice")
    (entry,) = pc.qa_bank.entries(scope="alice")
    assert entry.stale
    chunks = pc.knowledge.chunk_ids()
    assert len(chunks) == 3
    # the refresh, and one warm task per chunk (Config.kv_warm, on by default)
    assert sorted((t.kind, t.question) for t in pc.idle_queue.pending()) == sorted(
        [("refresh", "When is the choir rehearsal?"), *(("warm", c) for c in chunks)])
    report = pc.idle()
    assert report.by_kind == {"warm": 3, "refresh": 1}
    (entry,) = pc.qa_bank.entries(scope="alice")
    assert not entry.stale
    assert pc.ask("When is the choir rehearsal?", scope="alice", **GEN).source == "qa_bank"


def test_bad_documents_and_questions() -> None:
    pc = _pc()
    with pytest.raises(ValueError, match="document 1: .*empty"):
        pc.add_documents(["fine text", "   "])
    assert len(pc.knowledge) == 0  # nothing indexed from the failed batch
    with pytest.raises(ValueError, match="not valid UTF-8"):
        pc.add_documents([b"\xff\xfe broken"])
    report = pc.add_documents([DOCS[0], DOCS[0]])
    assert len(report.new_chunks) == 1 and report.duplicate_chunks == 0
    assert len(pc.add_documents([DOCS[0]]).new_chunks) == 0
    with pytest.raises(ValueError, match="non-empty str"):
        pc.ask("  ")
    with pytest.raises(ValueError, match="exceeds the model's context"):
        pc.ask("why " * 9000, **GEN)


_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
import percache_plugin as percache
from tests.helpers import tiny_pair
model, tok = tiny_pair("llama")
pc = percache.enable(model, tok, draft_calibrate_idle=False, store={store!r}, embedder="hash", answer_grounding=False)
hit = pc.ask("When is the choir rehearsal?", scope="alice", max_new_tokens=4)
para = pc.ask("Tell me who borrowed the projector", scope="alice", max_new_tokens=4)
print(json.dumps([hit.source, hit.text, para.source, para.stats.tokens_reused, len(pc.knowledge)]))
"""


def test_second_process_reuses_both_banks(tmp_path: Path) -> None:
    pc = _pc(tmp_path)
    pc.add_documents(DOCS, scope="alice")
    first = pc.ask("When is the choir rehearsal?", scope="alice", **GEN)
    pc.disable()
    root = str(Path(__file__).resolve().parent.parent)
    res = subprocess.run([sys.executable, "-c", _CHILD.format(root=root, store=str(tmp_path))],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    source, text, para_source, reused, n_chunks = json.loads(res.stdout.strip().splitlines()[-1])
    assert (source, text) == ("qa_bank", first.text)
    assert para_source == "generated" and reused > 0
    assert n_chunks == 3  # loaded from disk, not re-added


def test_ask_embeds_the_question_once() -> None:
    pc = _pc()
    pc.add_documents(DOCS, scope="alice")
    calls: list[list[str]] = []
    embed = pc.embedder.embed

    def counting(texts):  # type: ignore[no-untyped-def]
        calls.append(list(texts))
        return embed(texts)

    pc.embedder.embed = counting  # type: ignore[method-assign]
    pc.ask("Who borrowed the projector?", scope="alice", **GEN)
    assert [t for t in calls if t == ["Who borrowed the projector?"]] == [["Who borrowed the projector?"]]


def test_qa_answers_are_bound_to_the_model_fingerprint(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = _pc(store)
    first.add_documents(DOCS, scope="alice")
    answer = first.ask("When is the choir rehearsal?", scope="alice", **GEN)
    assert answer.source == "generated"
    first.close()
    model, tok = tiny_pair("llama", hidden_size=48)  # another model on the same store
    other = percache.enable(model, tok, draft_calibrate_idle=False, store=store, embedder="hash", answer_grounding=False, predict="off")
    assert other.fingerprint != first.fingerprint
    again = other.ask("When is the choir rehearsal?", scope="alice", **GEN)
    assert again.source == "generated"  # not the first model's stored answer
    other.configure(qa_share_across_models=True)
    shared = other.ask("When is the choir rehearsal?", scope="alice", **GEN)
    assert shared.source == "qa_bank" and shared.text == answer.text
    other.close()


class _StopAfter:
    """A caller's own stopping criterion: ends the answer after ``n`` new tokens."""

    def __init__(self, n: int) -> None:
        self.n, self.start = n, None

    def __call__(self, input_ids, scores, **kwargs):  # type: ignore[no-untyped-def]
        import torch

        if self.start is None:
            self.start = input_ids.shape[1] - 1
        return torch.full((input_ids.shape[0],), input_ids.shape[1] - self.start >= self.n, dtype=torch.bool)


def test_an_answer_cut_by_the_callers_stopping_criteria_is_not_stored() -> None:
    # A cut answer stored in the QA bank would be served later, whole-looking, to the question.
    pc = _pc()
    pc.add_documents(DOCS, scope="alice")
    q = "When is the choir rehearsal?"
    cut = pc.ask(q, scope="alice", max_new_tokens=12, stopping_criteria=[_StopAfter(2)])
    assert cut.source == "generated" and cut.stats is not None and cut.stats.new_tokens == 2
    assert pc.qa_bank.entries(scope="alice") == []
    assert cut.not_stored == "cut by the caller's stopping criteria"
    whole = pc.ask(q, scope="alice", max_new_tokens=12)
    assert whole.source == "generated" and whole.not_stored == ""  # generated again, then stored
    # the caller's criterion that never fires: the model's own ending, stored
    other = pc.ask("Who borrowed the projector?", scope="alice", max_new_tokens=4,
                   stopping_criteria=[_StopAfter(50)])
    assert other.not_stored == "" and len(pc.qa_bank.entries(scope="alice")) == 2
    pc.close()
