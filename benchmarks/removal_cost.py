"""What removing or adding one document costs as the QA bank of its scope grows.

A removal or an addition re-checks every fresh stored answer of the document's scope: its
question is retrieved again and the answer is marked stale when its top-k moved
(``percache_documents_added``). A removal also forgets what was built on the chunks twice,
saves the index snapshot and checkpoints SQLite. This times, on an on-disk store, one
``pc.knowledge.remove_document`` and one ``pc.add_documents`` of the same document in a scope
of ``--docs`` synthetic documents holding N stored answers, for each N of ``--answers``:

- ``remove_ms`` / ``add_ms``: medians over ``--repeats`` of the whole call;
- ``recheck_ms``: the part of it spent in ``percache_documents_added`` (the re-check);
- ``retrievals``, ``stale``: the counts per call, each value seen over the repeats (retrievals
  run by the re-check, answers it marked stale). Answers marked stale or deleted are stored fresh again, untimed,
  before the next call, so every call starts from N fresh answers (a removal deletes those
  built on the document's chunks before the re-check: it retrieves for the others).

Both re-check paths are timed on one handle, alternating every repeat: ``batched`` (the
default: every question of the scope in one ``percache_retrieve_batch`` call) and
``per_answer`` (one ``percache_retrieve`` per question: what a plugin wrapping only
``percache_retrieve``, as this script's per-answer probe does, gets).

No forward runs: the answers are stored directly (``pc.qa_bank.add``, sources = the question's
retrieval now), the model is a tiny random Llama with SmolLM2's tokenizer.

Example::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/removal_cost.py --answers 0 100 1000 3000
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import percache_plugin as percache
from percache_plugin.bundled import SMOLLM2_GGUF, smollm2_path
from percache_plugin.hooks.specs import hookimpl

SCOPE = "s"


class Probe:
    """Times the re-check (``percache_documents_added``) and counts its retrievals."""

    def __init__(self) -> None:
        self.retrievals = 0
        self.recheck_s = 0.0

    @hookimpl(wrapper=True)
    def percache_documents_added(self, ctx: Any, report: Any) -> Generator[None, Any, Any]:
        start = time.perf_counter()
        try:
            return (yield)
        finally:
            self.recheck_s += time.perf_counter() - start


class PerAnswer(Probe):
    """Wraps ``percache_retrieve`` only: the re-check retrieves one question at a time."""

    @hookimpl(wrapper=True)
    def percache_retrieve(self, ctx: Any, query: Any, k: int, scope: str | None) -> Generator[None, Any, Any]:
        self.retrievals += 1
        return (yield)


class Batched(Probe):
    """Wraps ``percache_retrieve_batch`` only: the re-check's batches run."""

    @hookimpl(wrapper=True)
    def percache_retrieve_batch(self, ctx: Any, queries: Any, k: int,
                                scope: str | None) -> Generator[None, Any, Any]:
        self.retrievals += len(queries)
        return (yield)


ARMS = ("per_answer", "batched")


def _words(rng: random.Random, vocab: list[str], n: int) -> str:
    return " ".join(rng.choice(vocab) for _ in range(n))


def _model(tok: Any) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    return LlamaForCausalLM(config).eval()


def _refresh(pc: percache.PerCache, questions: list[str], k: int) -> None:
    """Store again, fresh, every answer marked stale or deleted (a removal deletes those built
    on the document's chunks), its sources the question's retrieval now."""
    fresh = {e.question for e in pc.qa_bank.entries(scope=SCOPE) if not e.stale}
    for q in questions:
        if q not in fresh:
            sources = [c.id for c in pc.knowledge.retrieve(q, k, scope=SCOPE)]
            pc.qa_bank.add(q, "an answer", scope=SCOPE, sources=sources)


def measure(tok: Any, n_answers: int, args: argparse.Namespace) -> dict[str, object]:
    rng = random.Random(args.seed)
    vocab = [f"w{i}" for i in range(args.vocab)]
    docs = [{"text": _words(rng, vocab, args.doc_words), "id": f"d{i}"} for i in range(args.docs)]
    extra = {"text": _words(rng, vocab, args.doc_words), "id": "x"}
    questions = [_words(rng, vocab, args.question_words) + "?" for _ in range(n_answers)]
    probes: dict[str, Probe] = {"per_answer": PerAnswer(), "batched": Batched()}
    with tempfile.TemporaryDirectory() as tmp:
        pc = percache.enable(_model(tok), tok, store=Path(tmp) / "store",
                             embedder=args.embedder, answer_grounding=False, predict="off",
                             kv_warm=False, draft_calibrate_idle=False, top_k=args.k)
        try:
            pc.add_documents(docs + [extra], scope=SCOPE)
            _refresh(pc, questions, args.k)
            chunks = len(pc.knowledge.chunks())
            rows: dict[str, list[float]] = {f"{a}_{op}{part}": [] for a in ARMS for op in ("remove", "add")
                                            for part in ("", "_recheck")}
            counts: dict[str, set[tuple[int, int]]] = {f"{a}_{op}": set() for a in ARMS for op in ("remove", "add")}
            for _ in range(args.repeats):
                for arm in ARMS:
                    probe = probes[arm]
                    pc.plugins.register(probe)
                    try:
                        for op in ("remove", "add"):
                            _refresh(pc, questions, args.k)
                            probe.retrievals, probe.recheck_s = 0, 0.0
                            before = sum(e.stale for e in pc.qa_bank.entries(scope=SCOPE))
                            start = time.perf_counter()
                            if op == "remove":
                                pc.knowledge.remove_document("x", SCOPE)
                            else:
                                pc.add_documents([extra], scope=SCOPE)
                            rows[f"{arm}_{op}"].append(time.perf_counter() - start)
                            rows[f"{arm}_{op}_recheck"].append(probe.recheck_s)
                            stale = sum(e.stale for e in pc.qa_bank.entries(scope=SCOPE)) - before
                            counts[f"{arm}_{op}"].add((probe.retrievals, stale))
                    finally:
                        pc.plugins.unregister(probe)
        finally:
            pc.close()
    out: dict[str, object] = {"answers": n_answers, "docs": args.docs, "chunks": chunks}
    for key, times in rows.items():
        out[f"{key}_ms"] = round(1000 * statistics.median(times), 1)
    for key, seen in counts.items():
        # one value per repeat: each removal and re-addition reuses HNSW slots, so on a bank
        # large enough for HNSW to be approximate a question can retrieve otherwise next time
        out[f"{key}_retrievals"] = sorted({r for r, _ in seen})
        out[f"{key}_stale"] = sorted({s for _, s in seen})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, nargs="+", default=[0, 100, 1000, 3000])
    parser.add_argument("--docs", type=int, default=50, help="documents in the scope besides the one moved")
    parser.add_argument("--doc-words", type=int, default=300)
    parser.add_argument("--question-words", type=int, default=6)
    parser.add_argument("--vocab", type=int, default=3000, help="distinct words the texts are drawn from")
    parser.add_argument("--k", type=int, default=3, help="top_k")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--embedder", default="hash", help="'hash' or 'minilm'")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_path(), gguf_file=SMOLLM2_GGUF)
    for n in args.answers:
        print(json.dumps(measure(tok, n, args)), flush=True)


if __name__ == "__main__":
    main()
