"""One store shared by two processes (and by two handles in one process).

Each worker adds documents and asks questions concurrently for a bounded time; afterwards
every document whose ``add_documents`` returned must be in the store, no call may have
raised, and every generated answer must equal an uncached generation over the same prompt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import percache_plugin as percache
from percache_plugin.assistant.ask import segments_for
from tests.helpers import tiny_pair

REPO = Path(__file__).resolve().parents[1]
GEN = {"max_new_tokens": 3}
_WORDS = ["garden", "budget", "choir", "train", "lamp", "piano", "river", "ticket", "oven",
          "violin", "tennis", "harbor", "pencil", "meadow", "rocket", "saddle", "turnip", "quartz"]
# Mostly distinct questions (generated through the K/V path), some repeated (QA-bank upserts).
QUESTIONS = [f"{_WORDS[i % 18]} {_WORDS[(i * 5 + 3) % 18]} {_WORDS[(i * 7 + 11) % 18]}?"
             for i in range(36)]
DURATION_S = float(os.environ.get("PERCACHE_SHARED_TEST_S", "20"))

WORKER = """
import json, os, random, sys, time, traceback
sys.path.insert(0, {repo!r})
import torch
torch.set_num_threads(1)
import percache_plugin as percache
from tests.helpers import tiny_pair
from tests.test_shared_store import GEN, QUESTIONS, doc_text

store, name, duration, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
model, tok = tiny_pair("llama")
pc = percache.enable(model, tok, store=store, embedder="hash", predict="off")
open(out + ".ready", "w").close()
while not all(os.path.exists(p) for p in sys.argv[5:]):  # start together
    time.sleep(0.05)
deadline = time.time() + duration
rng = random.Random(name)
added, answers, errors, ops = [], [], [], 0
i = 0
while time.time() < deadline:
    try:
        if rng.random() < 0.5:
            pc.add_documents([doc_text(name, i)], scope="s")
            added.append(doc_text(name, i))
            i += 1
        else:
            q = rng.choice(QUESTIONS)
            a = pc.ask(q, scope="s", **GEN)
            answers.append([q, a.source, a.text, list(a.sources), a.matched_question])
        ops += 1
    except Exception:
        errors.append(traceback.format_exc())
pc.close()
json.dump({{"added": added, "answers": answers, "errors": errors, "ops": ops}}, open(out, "w"))
"""


def doc_text(name: str, i: int) -> str:
    return f"Note {i} from {name}: the {_WORDS[i % len(_WORDS)]} plan {i * 7}."


def _check(store: Path, results: list[dict]) -> None:
    errors = [e for r in results for e in r["errors"]]
    assert not errors, f"{len(errors)} errors, first:\n{errors[0]}"
    model, tok = tiny_pair("llama")
    pc = percache.enable(model, tok, store=store, embedder="hash", predict="off")
    ref = percache.enable(*tiny_pair("llama"), store=None, embedder="hash", predict="off",
                          use_kv=False)
    try:
        texts = {pc.knowledge.chunk(c).text for c in pc.knowledge.chunk_ids()}
        lost = [d for r in results for d in r["added"] if d not in texts]
        assert not lost, f"{len(lost)} documents lost of {sum(len(r['added']) for r in results)}"
        generated: dict[str, set[str]] = {}
        wrong = 0
        for r in results:
            for q, source, text, sources, _ in r["answers"]:
                if source != "generated":
                    continue
                generated.setdefault(q, set()).add(text)
                segs = segments_for(pc.config.system_prompt, q,
                                    [pc.knowledge.chunk(c) for c in sources])
                if ref.generate(segs, do_sample=False, **GEN).text.strip() != text:
                    wrong += 1
        for r in results:
            for _q, source, text, _, matched in r["answers"]:
                if source == "qa_bank" and text not in generated.get(matched, set()):
                    wrong += 1
        hits = sum(a[1] == "qa_bank" for r in results for a in r["answers"])
        made = sum(a[1] == "generated" for r in results for a in r["answers"])
        print(f"checked: {made} generated answers against an uncached generation, {hits} "
              f"QA-bank answers; {len(lost)} documents lost, {wrong} wrong answers")
        assert wrong == 0, f"{wrong} wrong answers"
    finally:
        pc.close()
        ref.close()


def test_two_processes_share_one_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    names = ("p1", "p2")
    ready = [str(tmp_path / f"{n}.json.ready") for n in names]
    t0 = time.time()
    procs = [subprocess.Popen(
        [sys.executable, "-c", WORKER.format(repo=str(REPO)), str(store), name, str(DURATION_S),
         str(tmp_path / f"{name}.json"), *ready], env=env) for name in names]
    for p in procs:
        assert p.wait(timeout=DURATION_S + 180) == 0
    results = [json.loads((tmp_path / f"{n}.json").read_text()) for n in ("p1", "p2")]
    ops = sum(r["ops"] for r in results)
    print(f"two processes, {DURATION_S:.0f} s of concurrent work ({time.time() - t0:.0f} s in all): "
          f"{ops} operations, "
          f"{sum(len(r['added']) for r in results)} documents added, "
          f"{sum(len(r['answers']) for r in results)} questions, "
          f"{sum(len(r['errors']) for r in results)} errors")
    assert all(r["added"] and r["answers"] for r in results)
    _check(store, results)


def test_two_handles_in_one_process(tmp_path: Path) -> None:
    store = tmp_path / "store"
    handles = [percache.enable(*tiny_pair("llama"), store=store, embedder="hash", predict="off")
               for _ in range(2)]
    results = [{"added": [], "answers": [], "errors": [], "ops": 0} for _ in handles]
    try:
        for i in range(12):
            for h, (pc, r) in enumerate(zip(handles, results, strict=True)):
                doc = doc_text(f"h{h}", i)
                pc.add_documents([doc], scope="s")
                r["added"].append(doc)
                q = QUESTIONS[i % len(QUESTIONS)]
                a = pc.ask(q, scope="s", **GEN)
                r["answers"].append([q, a.source, a.text, list(a.sources), a.matched_question])
        # Each handle sees the other's documents without reopening.
        for pc in handles:
            texts = {pc.knowledge.chunk(c).text for c in pc.knowledge.chunk_ids()}
            assert all(d in texts for r in results for d in r["added"])
    finally:
        for pc in handles:
            pc.close()
    _check(store, results)


def test_a_store_command_beside_an_open_handle_loses_nothing(tmp_path: Path) -> None:
    # `percache store info` while a handle (a server) had the store open deleted the
    # database's WAL when it closed: what the handle wrote afterwards (facts, answers, K/V
    # rows) was lost to other processes (the handle's own opening had dropped its SQLite locks).
    store = tmp_path / "store"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    pc = percache.enable(*tiny_pair("llama"), store=store, embedder="hash", predict="off")
    try:
        pc.memory.add("the garden plan is due on friday", scope="s")
        subprocess.run([sys.executable, "-m", "percache_plugin.cli", "store", "info", str(store)],
                       env=env, check=True, capture_output=True)
        pc.memory.add("the choir meets on tuesday", scope="s")
        read = ("import sys, percache_plugin as p; from tests.helpers import tiny_pair\n"
                "h = p.enable(*tiny_pair('llama'), store=sys.argv[1], embedder='hash', predict='off')\n"
                "print(len(h.memory.list('s'))); h.close()")
        seen = subprocess.run([sys.executable, "-c", read, str(store)], env=env, check=True,
                              capture_output=True, text=True).stdout.split()[-1]
        assert seen == "2", f"another process sees {seen} of the 2 facts added"
    finally:
        pc.close()
