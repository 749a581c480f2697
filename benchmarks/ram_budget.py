"""What the RAM tier really holds against ``ram_cache_bytes``, on SmolLM2 with QMSum chunks,
chat sessions and a persona.
``--memory-store``: the same over a store held in memory, whose nodes the tier serves uncopied;
``held twice`` is then the loaded tensors alive besides the store's own (0: nothing duplicated).

Every chunk tensor a load returns is followed by a weak reference (``bench.held.HeldChunks``);
after each request the ones still alive are what the tier holds (the caller keeps no cache).
Printed per phase: the largest of those bytes, the tier's own count (``bytes``), its join
buffers (``join_bytes``, outside the budget by design) and the sessions' own K/V (``kv_bytes``
of their last turn, the session's memory, not the tier's).

    python benchmarks/ram_budget.py --data ../shared/data/qmsum --budget-mib 16
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import torch

from percache_plugin import enable
from percache_plugin.bench.common import transcript_chunks
from percache_plugin.bench.held import HeldChunks
from percache_plugin.bench.ttft import SYSTEM
from percache_plugin.buffer.plugin import RamTierKV
from percache_plugin.bundled import load_smollm2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="QMSum folder")
    ap.add_argument("--budget-mib", type=float, default=16.0, help="ram_cache_bytes, MiB")
    ap.add_argument("--meetings", type=int, default=3)
    ap.add_argument("--memory-store", action="store_true",
                    help="a store held in memory (store=None): 'held twice' counts the loaded tensors "
                         "alive that are not the store's own")
    args = ap.parse_args()
    torch.set_num_threads(1)
    budget = int(args.budget_mib * 2**20)
    meetings = [transcript_chunks(args.data, 6, 120, meeting=m) for m in range(args.meetings)]
    model, tok = load_smollm2(status=False)
    with tempfile.TemporaryDirectory() as tmp:
        loads = HeldChunks()
        pc = enable(model, tok, store=None if args.memory_store else Path(tmp) / "s", ram_cache_bytes=budget,
                    embedder="hash", predict="off", plugins=[loads])
        tier = next(p for p in pc.plugins.get_plugins() if isinstance(p, RamTierKV))
        rows: dict[str, dict[str, int]] = {}

        def note(phase: str, out: Any) -> None:
            row = rows.setdefault(phase, {"requests": 0, "ram_hits": 0, "alive": 0, "twice": 0, "bytes": 0,
                                          "join": 0, "session_kv": 0})
            stats = tier.ram_tier_stats()
            row["requests"] += 1
            row["ram_hits"] += out.stats.ram_hits
            row["alive"] = max(row["alive"], loads.alive_bytes())
            if args.memory_store:
                row["twice"] = max(row["twice"], loads.alive_bytes(besides=_own(pc.engine.store)))
            row["bytes"] = max(row["bytes"], int(stats.get("bytes", 0)))
            row["join"] = max(row["join"], int(stats.get("join_bytes", 0)))
            row["session_kv"] = max(row["session_kv"], getattr(out.stats, "kv_bytes", 0))

        for _ in range(2):
            for chunks, query in meetings:
                for cut in (6, 4):
                    note("knowledge chunks", pc.generate([SYSTEM, *chunks[:cut], query], max_new_tokens=4))
        pc.personas.add("pirate", "You are a terse pirate. Answer in one line.")
        for name, persona in (("a", None), ("b", None), ("c", "pirate"), ("d", "pirate")):
            pc.sessions.create(name, system=SYSTEM)
            for chunks, query in meetings[:2]:
                out = pc.chat(f"{chunks[0]}\n\n{query}", session=name, persona=persona, max_new_tokens=4)
                note("sessions" if persona is None else "persona sessions", out)
        pc.close()
    print(f"ram_cache_bytes {budget:,}")
    print("phase | requests | RAM hits | held by the tier (measured) | held twice | tier bytes | join_bytes | session K/V")
    for phase, r in rows.items():
        print(f"{phase} | {r['requests']} | {r['ram_hits']} | {r['alive']:,} | {r['twice']:,} | {r['bytes']:,} "
              f"| {r['join']:,} | {r['session_kv']:,}")


def _own(store: Any) -> set[int]:
    """The storages of the tensors an in-memory store holds (``KVStore.get(shared=True)``)."""
    own = set()
    for node in store.nodes():
        kv = store.get(node.key, shared=True)
        if kv is not None:
            own.update(t.untyped_storage().data_ptr() for t in (*kv.keys, *kv.values))
    return own


if __name__ == "__main__":
    main()
