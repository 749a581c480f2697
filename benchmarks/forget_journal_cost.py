"""What the forget journal costs on a store holding ``--nodes`` K/V nodes.

A forget (a removed chunk, a forgotten fact) writes its ids to ``forget_journal`` before its
first step and deletes them after its last; ``enable()``, every ``ask()`` and every run of idle
work call ``ForgetJournal.recover``, which reads the table and re-runs what a failure or a
crash left. This times, on an on-disk store of a tiny random Llama with SmolLM2's tokenizer
whose K/V store holds ``--nodes`` nodes (each tagged as the K/V of its own chunk id):

- ``journal_open_ms``: opening the journal (connection and schema check), median of ``--repeats``;
- ``recover_empty_us``: ``recover()`` with no row pending (what ``ask()`` and ``enable()`` add),
  median of ``--calls`` calls;
- ``enable_ms``: the whole ``enable()`` on the store (it opens the journal and recovers),
  median of ``--repeats``, with no row pending and with one pending row of a gone chunk;
- ``rerun_ms``: ``recover()`` re-running the forget of one gone chunk (its answers, its K/V
  found among every node of every fingerprint, its predictions), median of ``--repeats``;
- ``nodes_before`` / ``nodes_after``: the node counts around the re-runs (one node per re-run).

Example::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/forget_journal_cost.py --nodes 1000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import percache_plugin as percache
from percache_plugin.bundled import SMOLLM2_GGUF, smollm2_path
from percache_plugin.forget_journal import ForgetJournal
from percache_plugin.kv.chunk import ChunkKV
from percache_plugin.kv.store import DB_NAME

SETTINGS: dict[str, Any] = dict(embedder="hash", answer_grounding=False, predict="off", kv_warm=False,
                                draft_calibrate_idle=False)


def _model(tok: Any) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    return LlamaForCausalLM(config).eval()


def _fill(pc: percache.PerCache, n: int) -> None:
    """``n`` one-token nodes, node ``i`` the K/V of chunk ``c-i``."""
    kv = ChunkKV(tuple(torch.zeros(2, 1, 16) for _ in range(2)), tuple(torch.zeros(2, 1, 16) for _ in range(2)))
    for i in range(n):
        pc.engine.store.put(f"n-{i}", kv, parent=None, start=0, token_ids=[i], extra={"chunk": f"c-{i}"})


def _pending(journal: ForgetJournal, chunk_id: str) -> None:
    """A row left by a forget of ``chunk_id`` that failed after it was journaled."""
    with contextlib.suppress(RuntimeError), journal.forgetting("chunk", [chunk_id]):
        raise RuntimeError("the forget failed")


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)


def measure(tok: Any, model: Any, args: argparse.Namespace) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        pc = percache.enable(model, tok, store=store, **SETTINGS)
        _fill(pc, args.nodes)
        nodes_before = len(pc.engine.store.nodes())
        opens = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            ForgetJournal(store / DB_NAME).close()
            opens.append(_ms(start))
        journal = pc.assistant.forget_journal
        calls = []
        for _ in range(args.calls):
            start = time.perf_counter()
            journal.recover()
            calls.append((time.perf_counter() - start) * 1e6)
        reruns = []
        for i in range(args.repeats):
            _pending(journal, f"c-{i}")
            start = time.perf_counter()
            assert journal.recover(force=True) == 1
            reruns.append(_ms(start))
        nodes_after = len(pc.engine.store.nodes())
        pc.close()
        enables: dict[str, list[float]] = {"none_pending": [], "one_pending": []}
        for i in range(args.repeats):
            for arm in enables:
                if arm == "one_pending":
                    j = ForgetJournal(store / DB_NAME)
                    _pending(j, f"c-{args.repeats + i}")
                    j.close()
                start = time.perf_counter()
                pc = percache.enable(model, tok, store=store, **SETTINGS)
                enables[arm].append(_ms(start))
                assert not pc.assistant.forget_journal.pending()
                pc.close()
        return {"nodes": args.nodes, "nodes_before": nodes_before, "nodes_after": nodes_after,
                "journal_open_ms": statistics.median(opens),
                "recover_empty_us": round(statistics.median(calls), 1),
                "rerun_ms": statistics.median(reruns), "rerun_ms_all": reruns,
                **{f"enable_ms_{arm}": statistics.median(v) for arm, v in enables.items()},
                **{f"enable_ms_{arm}_all": v for arm, v in enables.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000, help="K/V nodes in the store")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000, help="recover() calls with nothing pending")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_path(), gguf_file=SMOLLM2_GGUF)
    print(json.dumps(measure(tok, _model(tok), args)), flush=True)


if __name__ == "__main__":
    main()
