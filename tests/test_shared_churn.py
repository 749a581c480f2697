"""Two processes on one store at once, one adding and using what the other removes: process A
adds documents, asks, chats, adds memory facts and runs idle work (questions predicted from new
chunks and answered, their K/V warmed) while process B removes documents, gives
documents again under the same id with new text, adds and forgets facts and tries
``percache store remove --doc`` (refused while a handle has the store open). Afterwards: no
document whose ``add_documents`` returned is lost, each document B touched holds the text B
gave it last (or is gone if B removed it last), nothing removed or forgotten is served by a
fresh handle (answer, K/V, recalled fact), and no request raised."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import percache_plugin as percache
from tests.helpers import tiny_pair
from tests.test_shared_removal import REPO, SETTINGS

DURATION_S = float(os.environ.get("PERCACHE_CHURN_TEST_S", "8"))
WORDS = ["garden", "budget", "choir", "train", "lamp", "piano", "river", "ticket", "oven", "violin"]
QUESTIONS = [f"what about the {a} and the {b}?" for a in WORDS[:5] for b in WORDS[5:]]

WORKER = """
import json, os, random, subprocess, sys, time, traceback
sys.path.insert(0, {repo!r})
import torch
torch.set_num_threads(1)
import percache_plugin as percache
from tests.helpers import tiny_pair
from tests.test_shared_removal import SETTINGS
from tests.test_shared_churn import QUESTIONS, WORDS, doc

store, role, duration, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
# A also predicts questions about new chunks and warms their K/V in idle time (pc.idle below)
extra = dict(predict="knowledge", kv_warm=True, prediction_quiet_s=0.0) if role == "A" else {{}}
pc = percache.enable(*tiny_pair("llama"), store=store, **{{**SETTINGS, **extra}})
open(out + ".ready", "w").close()
while not all(os.path.exists(p) for p in sys.argv[5:]):  # start together
    time.sleep(0.05)
rng = random.Random(role)
log, errors, i = [], [], 0
deadline = time.time() + duration
facts = []
if role == "A":
    pc.sessions.create("a")
else:  # percache store remove --doc, once, beside B's other work (a subprocess is slow to start)
    cli = subprocess.Popen([sys.executable, "-m", "percache_plugin.cli", "store", "remove", store,
                            "--doc", "a1", "--scope", "s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
while time.time() < deadline:
    i += 1
    r = rng.random()
    try:
        if role == "A":
            if r < 0.3:
                d = doc("a", i, 0)
                pc.add_documents([d], scope="s")
                log.append(["added", d["id"], d["text"]])
            elif r < 0.6:
                a = pc.ask(rng.choice(QUESTIONS), scope="s", max_new_tokens=3)
                log.append(["asked", a.source, list(a.sources)])
            elif r < 0.7:
                pc.chat(rng.choice(QUESTIONS), session="a", memory_scope="s", max_new_tokens=3)
            elif r < 0.85:
                report = pc.idle(budget_s=0.5)
                log.append(["idle", report.tasks_run, None])
            else:
                f = pc.memory.add(f"fact {{i}} of A about the {{rng.choice(WORDS)}}", scope="s").fact
                log.append(["remembered", f.id, f.text])
        else:
            j = rng.randrange(6)
            if r < 0.35:
                d = doc("b", j, i)
                pc.add_documents([d], scope="s")
                log.append(["added", d["id"], d["text"]])
            elif r < 0.6:
                pc.knowledge.remove_document(f"b{{j}}", "s")
                log.append(["removed", f"b{{j}}", None])  # (also when b{{j}} was not there)
            elif r < 0.75:
                f = pc.memory.add(f"fact {{i}} of B about the {{rng.choice(WORDS)}}", scope="s").fact
                facts.append(f.id)
                log.append(["remembered", f.id, f.text])
            elif facts:
                fid = facts.pop(rng.randrange(len(facts)))
                pc.memory.forget(fid)
                log.append(["forgot", fid, None])
    except Exception:
        errors.append(traceback.format_exc())
if role == "B":
    _, err = cli.communicate()
    log.append(["cli", cli.returncode, err[-300:]])
pc.close()
json.dump({{"log": log, "errors": errors}}, open(out, "w"))
"""


def doc(who: str, j: int, version: int) -> dict[str, str]:
    words = " ".join(WORDS[(j + version + k) % len(WORDS)] for k in range(4))
    return {"id": f"{who}{j}", "text": f"Note {j} by {who}, version {version}: the {words} plan."}


def test_two_processes_adding_and_removing_on_one_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    percache.enable(*tiny_pair("llama"), store=store, **SETTINGS).close()  # created once
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    ready = [str(tmp_path / f"{r}.json.ready") for r in "AB"]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER.format(repo=str(REPO)), str(store), role,
                               str(DURATION_S), str(tmp_path / f"{role}.json"), *ready], env=env)
             for role in "AB"]
    for p in procs:
        assert p.wait(timeout=DURATION_S + 240) == 0
    a, b = (json.loads((tmp_path / f"{r}.json").read_text()) for r in "AB")
    errors = a["errors"] + b["errors"]
    assert not errors, f"{len(errors)} requests raised, first:\n{errors[0]}"
    assert any(e[0] == "removed" for e in b["log"]) and any(e[0] == "asked" for e in a["log"])
    cli = [e for e in b["log"] if e[0] == "cli"]  # refused while a handle has the store open
    assert cli and all(code != 0 and "open" in err for _, code, err in cli), cli
    pc = percache.enable(*tiny_pair("llama"), store=store, **SETTINGS)
    try:
        chunks = pc.knowledge.chunks()
        texts = {(c.doc_id, c.text) for c in chunks}
        for _, doc_id, text in (e for e in a["log"] if e[0] == "added"):
            assert (doc_id, text) in texts, f"{doc_id} lost"
        last: dict[str, str | None] = {}
        for _, doc_id, text in (e for e in b["log"] if e[0] in ("added", "removed")):
            last[doc_id] = text
        for doc_id, text in last.items():
            held = {t for d, t in texts if d == doc_id}
            assert held == (set() if text is None else {text}), f"{doc_id}: {held} != {text}"
        ids = {c.id for c in chunks}
        live = {f.id for f in pc.memory.list("s")}
        forgotten = {e[1] for e in b["log"] if e[0] == "forgot"}
        assert forgotten and not live & forgotten  # the premise: B forgot facts
        for entry in pc.qa_bank.entries():  # every stored answer's sources are still there
            gone = set(entry.sources) - ids - live
            assert not gone, f"answer to {entry.question!r} built on removed or forgotten {gone}"
        orphans = {n.extra["chunk"] for n in pc.engine.store.nodes()
                   if n.extra.get("chunk") and n.extra["chunk"] not in ids | live}
        assert not orphans, f"K/V of removed chunks or forgotten facts: {orphans}"
        removed_text = {text for op, _, text in b["log"] if op == "added"} - {t for _, t in texts}
        assert removed_text  # the premise: some text B gave is gone
        print(f"A: {len(a['log'])} ops, B: {len(b['log'])} ops; {len(chunks)} chunks, "
              f"{len(pc.qa_bank.entries())} answers, {len(pc.engine.store.nodes())} K/V nodes")
    finally:
        pc.close()
