"""The cost of forgetting a fact that was recalled as text into the chat turns of N saved
sessions (``memory_recall_mode`` 'text'), and what the store held of it before and after.

SmolLM2 chats ``--turns`` turns in each of ``--sessions`` sessions with memory recall on (the
``hash`` embedder and threshold 0, so the fact is recalled into every turn: the worst case for
forget), the handle is closed, and the store is copied ``--repeats`` times per arm. Arm
``in-process``: a new handle (model already loaded) runs ``pc.memory.forget(id)``; arm ``cli``:
``percache memory forget STORE ID`` in this process (no model). Prints, per arm, the median and
every wall time of the forget call, the turns and sessions rewritten, and the needles found in
the store's files before and after: the fact's text, its token ids as stored, each turn's memory
block ids and the K/V bytes (last layer, head 0, one vector per position) from each session's
first memory block on. Then one more turn on a forgotten session, checked free of the fact.

    python benchmarks/forget_sessions.py [--sessions 10] [--turns 3] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import percache_plugin as percache
from percache_plugin.bundled import load_smollm2
from percache_plugin.cli import main as cli_main
from percache_plugin.session.schema import SESSIONS_DB

FACT = "Ana keeps her spare house key under the blue Quillberry flowerpot"
OTHER = "Ana's sister lives in Porto"
MESSAGES = ["Where is Ana's spare key?", "Which flowerpot do you mean?", "Is it safe there?",
            "What colour is the pot?", "Who else knows?"]


def _needles(pc: Any, tok: Any, fact_id: str) -> tuple[list[bytes], list[bytes]]:
    """(byte needles matched case-folded, tensor needles matched exactly) of every session."""
    text = [FACT.lower().encode(), json.dumps(tok(FACT, add_special_tokens=False)["input_ids"])[1:-1].encode()]
    kv: list[bytes] = []
    for name in pc.sessions.names():
        session = pc.sessions.get(name)
        if not session.turns:
            continue  # "default"
        pos, first = session.turns_start, None
        for turn in session.turns:
            if fact_id in turn.fact_ids and turn.bare_ids is not None:
                same = next(i for i, (a, b) in enumerate(zip(turn.user_ids, turn.bare_ids, strict=False)) if a != b)
                first = pos + same if first is None else first
                block = turn.user_ids[same:same + len(turn.user_ids) - len(turn.bare_ids)]
                text.append(json.dumps(block)[1:-1].encode())
            pos += turn.n_tokens
        keys = session.cache.layers[-1].keys
        kv += [keys[0, 0, p].contiguous().float().numpy().tobytes() for p in range(first or 0, keys.shape[2])]
    return text, kv


def _found(root: Path, text: list[bytes], kv: list[bytes]) -> int:
    hits = 0
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            low = data.lower()
            hits += sum(n in low for n in text) + sum(n in data for n in kv)
    return hits


def _recalled_turns(root: Path, fact_id: str) -> tuple[int, int]:
    db = sqlite3.connect(root / SESSIONS_DB)
    rows = db.execute("SELECT name, fact_ids FROM chat_turns").fetchall()
    db.close()
    hit = [name for name, ids in rows if fact_id in json.loads(ids)]
    return len(hit), len(set(hit))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sessions", type=int, default=10)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--new-tokens", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_smollm2()
    config: dict[str, Any] = dict(embedder="hash", predict="off", memory_recall=True, memory_threshold=0.0)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        pc = percache.enable(model, tok, store=base, **config)
        fact_id = pc.memory.add(FACT, scope="ana").fact.id
        pc.memory.add(OTHER, scope="ana")
        for s in range(args.sessions):
            pc.sessions.create(f"s{s}", system="You are a helpful assistant.")
            for t in range(args.turns):
                pc.chat(MESSAGES[t % len(MESSAGES)], session=f"s{s}", memory_scope="ana",
                        max_new_tokens=args.new_tokens)
        text, kv = _needles(pc, tok, fact_id)
        pc.close()
        turns, sessions = _recalled_turns(base, fact_id)
        before = _found(base, text, kv)
        print(f"{args.sessions} sessions x {args.turns} turns; the fact recalled into {turns} turns of "
              f"{sessions} sessions; {len(text)} text/id needles, {len(kv)} K/V needles; found before: {before}")
        for arm in ("in-process", "cli"):
            times, after = [], []
            for r in range(args.repeats):
                root = Path(tmp) / f"{arm}-{r}"
                shutil.copytree(base, root)
                if arm == "in-process":
                    pc = percache.enable(model, tok, store=root, **config)
                    t0 = time.perf_counter()
                    pc.memory.forget(fact_id)
                    times.append(time.perf_counter() - t0)
                    pc.close()
                else:
                    out = io.StringIO()
                    t0 = time.perf_counter()
                    with contextlib.redirect_stdout(out):
                        assert cli_main(["memory", "forget", str(root), fact_id]) == 0
                    times.append(time.perf_counter() - t0)
                    line = out.getvalue().strip()
                left, _ = _recalled_turns(root, fact_id)
                assert left == 0
                after.append(_found(root, text, kv))
            print(f"{arm}: forget median {statistics.median(times) * 1000:.0f} ms "
                  f"({', '.join(f'{x * 1000:.0f}' for x in times)}); found after: {after}")
        print(f"cli said: {line}")
        pc = percache.enable(model, tok, store=root, **config)
        reply = pc.chat("And now?", session="s0", memory_scope="ana", max_new_tokens=args.new_tokens)
        assert "Quillberry" not in tok.decode(reply.prompt_ids)
        print(f"next turn on s0 after forget: {reply.stats.prompt_tokens} prompt tokens, "
              f"{reply.stats.tokens_reused} reused, fact ids recalled {reply.stats.fact_ids}")
        pc.close()


if __name__ == "__main__":
    main()
