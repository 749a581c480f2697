"""One store, two processes: what one process removes, replaces or forgets, the other stops
serving at once, from the state it holds in memory (index, BM25 statistics, QA cache, memory
facts), without reopening. Process B is a subprocess taking commands on stdin, one at a time,
so each step is ordered: A acts, B changes the store, A acts again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from tests.helpers import tiny_pair

REPO = Path(__file__).resolve().parents[1]
GEN = {"max_new_tokens": 3}
SETTINGS: dict[str, Any] = dict(embedder="hash", predict="off", answer_grounding=False, kv_warm=False,
                                draft_calibrate_idle=False, memory_recall=True, memory_in_ask=True,
                                memory_threshold=0.0, relevance_threshold=None)
DOCS = [{"text": "The choir rehearsal moved to the east hall on Friday.", "id": "choir"},
        {"text": "The garden budget doubles next spring for new tulips.", "id": "garden"},
        {"text": "The harbor ferry leaves at noon from pier seven.", "id": "ferry"}]

SERVER = """
import json, sys
sys.path.insert(0, {repo!r})
import torch
torch.set_num_threads(1)
import percache_plugin as percache
from tests.helpers import tiny_pair
from tests.test_shared_removal import SETTINGS
pc = percache.enable(*tiny_pair("llama"), store=sys.argv[1], **SETTINGS)
print(json.dumps("ready"), flush=True)
for line in sys.stdin:
    op, args = json.loads(line)
    if op == "remove":
        out = list(pc.knowledge.remove_document(*args))
    elif op == "add":
        out = [c.id for c in pc.add_documents([args[0]], scope=args[1]).new_chunks]
    elif op == "forget":
        out = pc.memory.forget(args[0]).fact_id
    elif op == "remember":
        out = pc.memory.add(args[0], scope=args[1]).fact.id
    else:
        out = None
    print(json.dumps(out), flush=True)
pc.close()
"""


class Other:
    """Process B: a handle on the same store in a subprocess, one command at a time."""

    def __init__(self, store: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER.format(repo=str(REPO)), str(store)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert self._reply() == "ready"

    def _reply(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, "process B ended"
        return json.loads(line)

    def __call__(self, op: str, *args: Any) -> Any:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps([op, list(args)]) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


@pytest.fixture
def two(tmp_path: Path) -> Iterator[tuple[percache.PerCache, Other]]:
    store = tmp_path / "store"
    pc = percache.enable(*tiny_pair("llama"), store=store, **SETTINGS)
    other = Other(store)
    try:
        yield pc, other
    finally:
        other.close()
        pc.close()


def _texts(pc: percache.PerCache, question: str) -> list[str]:
    return [c.text for c in pc.knowledge.retrieve(question, 3, scope="s")]


def test_a_document_another_process_removes_or_replaces_is_not_served(
        two: tuple[percache.PerCache, Other]) -> None:
    pc, other = two
    pc.add_documents(DOCS, scope="s")
    q = "When does the harbor ferry leave?"
    first = pc.ask(q, scope="s", **GEN)
    assert first.source == "generated" and pc.ask(q, scope="s", **GEN).source == "qa_bank"
    ferry = {c.id for c in pc.knowledge.chunks() if c.doc_id == "ferry"}
    assert ferry & set(first.sources)
    assert other("remove", "ferry", "s")  # B removes the document A's answer was built on
    assert not ferry & {c.id for c in pc.knowledge.retrieve(q, 3, scope="s")}
    again = pc.ask(q, scope="s", **GEN)
    assert again.source != "qa_bank" and not ferry & set(again.sources)
    new = {"text": "The choir rehearsal is cancelled this week; the hall is closed.", "id": "choir"}
    other("add", new, "s")  # B gives the document again with new text
    texts = _texts(pc, "Where is the choir rehearsal?")
    assert new["text"] in texts and DOCS[0]["text"] not in texts


def test_an_answer_another_process_marks_stale_is_not_served(two: tuple[percache.PerCache, Other]) -> None:
    pc, other = two
    pc.add_documents(DOCS, scope="s")
    q = "What does the garden budget pay for?"
    assert pc.ask(q, scope="s", **GEN).source == "generated"
    assert pc.ask(q, scope="s", **GEN).source == "qa_bank"
    # B adds a document that enters the question's top-k: B's re-check marks A's answer stale
    other("add", {"text": "What does the garden budget pay for? The garden budget pays for.", "id": "g2"}, "s")
    assert [e.stale for e in pc.qa_bank.entries()] == [True]
    assert pc.ask(q, scope="s", **GEN).source != "qa_bank"


def test_a_fact_another_process_forgets_is_not_recalled(two: tuple[percache.PerCache, Other]) -> None:
    pc, other = two
    pc.add_documents(DOCS, scope="s")
    fact = pc.memory.add("Ana keeps her spare key under the blue flowerpot.", scope="s").fact
    q = "Where is the spare key?"
    assert fact.text in {h.fact.text for h in pc.memory.search(q, scope="s")}
    answer = pc.ask(q, scope="s", **GEN)
    assert fact.id in answer.sources
    pc.sessions.create("c")
    first = pc.chat(q, session="c", memory_scope="s", **GEN)
    assert "flowerpot" in pc.tokenizer.decode(first.prompt_ids)  # the premise: it was recalled
    assert other("forget", fact.id) == fact.id
    assert fact.text not in {h.fact.text for h in pc.memory.search(q, scope="s")}
    again = pc.ask(q, scope="s", **GEN)
    assert again.source != "qa_bank" and fact.id not in again.sources
    second = pc.chat("And the front door?", session="c", memory_scope="s", **GEN)
    assert second.turn_id == 2 and "flowerpot" not in pc.tokenizer.decode(second.prompt_ids)
    added = other("remember", "Bob parks his bike behind the library.", "s")  # and A sees B's fact
    assert added in {h.fact.id for h in pc.memory.search("Where does Bob park his bike?", scope="s")}
