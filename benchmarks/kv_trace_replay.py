"""Record a K/V-store access trace from a replay of real QMSum questions (docs/TRACES.md format).

What the engine reads and writes in the K/V store depends only on the prompts: which chunks
retrieval returns for each question, in which order, and their token counts. This replays that
part of ``ask()`` for real: the meetings go into the knowledge bank (MiniLM embeddings, the
default retrieval), every QMSum query of the meetings and its hand-written paraphrase (if any)
is asked in a seeded interleaved order (questions come back reworded), each prompt is built with
SmolLM2's tokenizer, and the prefix-tree nodes are walked as the planner does: the longest
stored prefix is read, the rest written. No model forward runs, so it takes a minute, not
hours; node sizes are SmolLM2-135M fp32 K/V (46,080 bytes per token). The system prefix is
declared ``hot``. Feed the file to ``percache bench buffer --kv-trace``.

    python benchmarks/kv_trace_replay.py --data ../shared/data/qmsum --meetings 5 --out kv-replay.csv
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

import percache_plugin as percache
from percache_plugin.assistant.ask import segments_for
from percache_plugin.buffer.trace import Tracer, write_trace
from percache_plugin.buffer.workloads import BYTES_PER_TOKEN
from percache_plugin.bundled import load_smollm2
from percache_plugin.rag.qmsum import iter_meetings, meeting_text

PARAPHRASES = Path(__file__).resolve().parent / "data" / "qa_paraphrases.json"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", type=Path, default=Path("../shared/data/qmsum"))
    p.add_argument("--meetings", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2, help="times the question list is asked (shuffled)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("kv-replay.csv"))
    args = p.parse_args()
    para: dict[str, str] = {}
    for pair in json.loads(PARAPHRASES.read_text())["pairs"]:
        para[pair["query"]] = pair["paraphrase"]
    meetings = [m for m in iter_meetings(args.data) if m.queries][: args.meetings]
    model, tok = load_smollm2()
    tracer = Tracer()
    stored: set[str] = set()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as d:
        pc = percache.enable(model, tok, store=Path(d) / "s")
        for m in meetings:
            pc.add_documents({"text": meeting_text(m), "id": m.id}, scope=m.id)
        questions = [(m.id, q.text) for m in meetings for q in m.queries]
        questions += [(mid, para[q]) for mid, q in questions if q in para]
        order = [q for _ in range(args.rounds) for q in rng.sample(questions, len(questions))]
        for scope, question in order:
            query = pc.assistant.query(question)
            chunks = pc.hooks.retrieve(pc.assistant.ctx, query, pc.config.top_k, scope)
            prompt = pc.prompt(segments_for(pc.config.system_prompt, question, chunks))
            reading = True
            for piece in prompt.reusable:
                assert piece.key is not None
                size = piece.n_tokens * BYTES_PER_TOKEN
                cls = "hot" if piece.start == 0 else ""
                if reading and piece.key in stored:
                    tracer.record("r", f"kv/{piece.key}", 0, size, cls)
                    continue
                reading = False
                if piece.key not in stored:
                    tracer.record("w", f"kv/{piece.key}", 0, size, cls)
                    stored.add(piece.key)
        pc.close()
    write_trace(args.out, tracer.accesses)
    reads = sum(a.op == "r" for a in tracer.accesses)
    print(f"{len(order)} questions over {len(meetings)} meetings: {reads} reads, "
          f"{len(tracer.accesses) - reads} writes, {len(stored)} nodes -> {args.out}")


if __name__ == "__main__":
    main()
