"""Cached-path TTFT only, to compare two checkouts side by side (``PYTHONPATH`` picks one).

Fills an on-disk store once with the ``bench ttft`` prompt (2,022 tokens on QMSum), then
``REPEATS`` times opens a fresh handle and times its first request (one new token), printing
JSON: ``ttft_s``, ``enable_s`` and ``reused`` per request. Works on code from before the
architecture redesign (``enable`` from ``percache_plugin``, ``disable()`` to end a handle) and
after it (``close()``; the RAM tier is switched off so both read the disk store).

    PYTHONPATH=../old python benchmarks/cached_ttft.py old 8 > old.json
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from percache_plugin import enable
from percache_plugin.bench.common import transcript_chunks
from percache_plugin.bundled import load_smollm2

SYSTEM = "You are a helpful assistant. Answer the question using the meeting notes."


def main(side: str, repeats: int, data: Path = Path("../shared/data/qmsum")) -> dict[str, object]:
    torch.set_num_threads(1)
    new = (Path(sys.modules["percache_plugin"].__file__ or "").parent / "handle.py").exists()
    chunks, query = transcript_chunks(data, 8, 170)
    segments = [SYSTEM, *chunks, query]
    model, tok = load_smollm2()
    opts = {"ram_cache_bytes": 0} if new else {}
    gen = {"max_new_tokens": 1, "do_sample": False}
    out: dict[str, list[float]] = {"ttft_s": [], "enable_s": [], "reused": []}
    with tempfile.TemporaryDirectory(prefix="percache-cached-") as store:
        pc = enable(model, tok, store=store, **opts)
        pc.generate(segments, **gen)  # fills the store
        (pc.close if new else pc.disable)()
        for _ in range(repeats):
            t0 = time.perf_counter()
            pc = enable(model, tok, store=store, **opts)
            out["enable_s"].append(time.perf_counter() - t0)
            g = pc.generate(segments, **gen)
            out["ttft_s"].append(g.stats.ttft_s)
            out["reused"].append(g.stats.tokens_reused)
            (pc.close if new else pc.disable)()
    return {"side": side, **out}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]), *(Path(a) for a in sys.argv[3:4]))))
