"""Where a drafted answer's decode phase spends its time outside the model's forwards, against plain decoding.

SmolLM2 answers held-out QMSum paraphrases as ``percache bench decode`` does (the chunks cached and the
weights packed in an untimed request; each round from the draft history before the answer), one
thread, plain and ``combined`` interleaved. Per answer, mode and round the decode phase (from the
first token's scores to the last token's stopping check, seen by a logits processor and a stopping
criterion passed with the request) is split into the model's forwards after the first (forward
pre/post hooks on the model; for a verify forward this includes the routing mode entered around
it) and the rest: the decoding loop's own Python (lookups, schedule, logits processors, stopping
criteria, cache crops), or generate's per-step work in plain decoding. Both wall time and the
thread's CPU time (``time.thread_time``: on a shared machine, what the thread ran rather than what
it waited for) are kept, with garbage-collector pauses in the phase (``gc.callbacks``) and the
CPU time before the first forward (reuse path, draft sources and index, generate's set-up).
``--profile N`` adds a cProfile of every timed request per mode (the N functions with the most own
time; the profiler slows Python-heavy code, so take the time split from a run without it).

    python benchmarks/decode_overhead.py --data ../shared/data/qmsum --skip 5 --meetings 5 \
        --questions 20 [--only ES2011a] [--repeats 3] [--profile 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import cProfile
import gc
import io
import json
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import LogitsProcessor, StoppingCriteria

import percache_plugin as percache
from percache_plugin.assistant.ask import qa_drafts, segments_for
from percache_plugin.bench.common import DEFAULT_QMSUM
from percache_plugin.bench.decode import PARAPHRASES, _meetings, _pairs
from percache_plugin.bundled import load_smollm2
from percache_plugin.decode import AcceptanceHistory, DraftHints
from percache_plugin.decode.sources import SESSION
from percache_plugin.rag.qmsum import meeting_text


class _Clock(LogitsProcessor):
    """Wall and thread CPU time (``time.thread_time``: what the process's thread ran, not what it
    waited for the shared cores) at the start and end of every model forward, at every token
    (a logits processor and a stopping criterion given to the request) and around every
    garbage-collector pause."""

    def __init__(self, model: Any) -> None:
        self.forwards: list[tuple[float, float, float, float]] = []  # wall start, end, cpu start, end
        self.gc: list[tuple[float, float]] = []  # wall
        self.fed: list[int] = []  # tokens fed per forward
        self.tokens: list[tuple[float, float]] = []  # (wall, cpu) at each stopping check
        self.first: tuple[float, float] | None = None  # (wall, cpu) at the first token's scores
        self._t = (0.0, 0.0)
        self._g = 0.0
        model.register_forward_pre_hook(self._pre, with_kwargs=True)
        model.register_forward_hook(self._post)
        gc.callbacks.append(self._gc)

    @staticmethod
    def now() -> tuple[float, float]:
        return time.perf_counter(), time.thread_time()

    def _pre(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        ids = kwargs.get("input_ids")
        self.fed.append(int(ids.shape[1]) if ids is not None else 0)
        self._t = self.now()

    def _post(self, *_: Any) -> None:
        wall, cpu = self.now()
        self.forwards.append((self._t[0], wall, self._t[1], cpu))

    def _gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._g = time.perf_counter()
        else:
            self.gc.append((self._g, time.perf_counter()))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.first is None:
            self.first = self.now()
        return scores

    def stop(self) -> StoppingCriteria:
        clock = self

        class _Stop(StoppingCriteria):
            def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kw: Any) -> torch.BoolTensor:
                clock.tokens.append(clock.now())
                return torch.zeros(input_ids.shape[0], dtype=torch.bool)  # type: ignore[return-value]

        return _Stop()

    def reset(self) -> None:
        for x in (self.forwards, self.gc, self.fed, self.tokens):
            x.clear()
        self.first = None


def _one(pc: Any, clock: _Clock, segments: Any, hints: DraftHints, mode: str, n: int,
         prof: cProfile.Profile | None) -> dict[str, Any]:
    pc.configure(drafting=mode != "plain", draft_sources=None)
    clock.reset()
    begin = clock.now()
    if prof is not None:
        prof.enable()
    gen = pc.generate(segments, max_new_tokens=n, do_sample=False, drafts=hints,
                      logits_processor=[clock], stopping_criteria=[clock.stop()])
    if prof is not None:
        prof.disable()
    assert clock.first is not None
    (w0, c0), (w1, c1) = clock.first, clock.tokens[-1]  # decode phase: first token's scores to the last stop check
    later = [f for f in clock.forwards if f[0] >= w0]
    fwd_w, fwd_c = sum(f[1] - f[0] for f in later), sum(f[3] - f[2] for f in later)
    pause = sum(min(b, w1) - max(a, w0) for a, b in clock.gc if b > w0 and a < w1)
    first = clock.forwards[0]
    return {"ids": gen.token_ids, "new": gen.stats.new_tokens, "forwards": len(clock.forwards),
            "decode_s": w1 - w0, "forward_s": fwd_w, "other_s": w1 - w0 - fwd_w - pause, "gc_s": pause,
            "decode_cpu": c1 - c0, "forward_cpu": fwd_c, "other_cpu": c1 - c0 - fwd_c,
            # before the first forward (reuse path, draft sources and index, generate's set-up)
            "setup_cpu": first[2] - begin[1], "setup_s": first[0] - begin[0],
            "fed": list(clock.fed), "forward_cpu_ms": [round((f[3] - f[2]) * 1e3, 1) for f in clock.forwards]}


def _table(rows: list[dict[str, Any]]) -> None:
    """Per answer and mode, medians over rounds: the decode phase split into forwards and the rest."""
    print("| answer | tokens | mode | forwards after the first | decode phase, wall ms | of it in forwards | outside"
          " forwards (gc) | decode phase, CPU ms | in forwards | per forward | outside | per forward | set-up"
          " before the first forward, CPU ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for mode in ("plain", "combined"):
            cells = r[mode]
            m = {k: statistics.median(c[k] for c in cells) * 1e3 for k in
                 ("decode_s", "forward_s", "other_s", "gc_s", "decode_cpu", "forward_cpu", "other_cpu", "setup_cpu")}
            after = cells[0]["forwards"] - 1
            print(f"| {r['question'][:40]} | {cells[0]['new']} | {mode} | {after} | {m['decode_s']:.0f} | "
                  f"{m['forward_s']:.0f} | {m['other_s']:.1f} ({m['gc_s']:.1f}) | {m['decode_cpu']:.0f} | "
                  f"{m['forward_cpu']:.0f} | {m['forward_cpu'] / max(1, after):.1f} | {m['other_cpu']:.1f} | "
                  f"{m['other_cpu'] / max(1, after):.2f} | {m['setup_cpu']:.1f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM)
    p.add_argument("--skip", type=int, default=5)
    p.add_argument("--meetings", type=int, default=5)
    p.add_argument("--questions", type=int, default=20)
    p.add_argument("--only", default="", help="comma-separated meeting ids to keep (others are not run)")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--profile", type=int, default=0, help="print this many functions of a cProfile per mode")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(1)
    model, tok = load_smollm2()
    clock = _Clock(model)
    plan = _pairs(PARAPHRASES, args.meetings, args.questions, args.skip)
    if args.only:
        plan = {m: q for m, q in plan.items() if m in args.only.split(",")}
    found = _meetings(args.data, set(plan))
    profs = {m: cProfile.Profile() for m in ("plain", "combined")} if args.profile else {}
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        for mid, qs in plan.items():
            pc = percache.enable(model, tok, store=Path(tmp) / mid, drafting=False)
            pc.add_documents({"text": meeting_text(found[mid]), "id": mid})
            for original, _ in qs:
                pc.ask(original, max_new_tokens=args.new_tokens)
            session: list[list[int]] = []
            history = AcceptanceHistory()
            for _, question in qs:
                q = pc.assistant.query(question)
                chunks = pc.hooks.retrieve(pc.assistant.ctx, q, pc.config.top_k, None)
                segments = segments_for(pc.config.system_prompt, question, chunks)
                hints = DraftHints(texts=qa_drafts(pc.assistant, q, None).texts, token_ids={SESSION: list(session)})
                pc.configure(drafting=True, draft_sources=())
                pc.engine.draft_history = AcceptanceHistory()
                pc.generate(segments, max_new_tokens=2, do_sample=False)
                pc.engine.pack_linears()
                row: dict[str, Any] = {"meeting": mid, "question": question, "plain": [], "combined": []}
                after = history
                for r in range(args.repeats):
                    for mode in (["plain", "combined"] if r % 2 == 0 else ["combined", "plain"]):
                        pc.engine.draft_history = copy.deepcopy(history)
                        row[mode].append(_one(pc, clock, segments, hints, mode, args.new_tokens, profs.get(mode)))
                        if mode == "combined":
                            after = pc.engine.draft_history
                history = after
                same = all(c["ids"] == row["plain"][0]["ids"] for c in row["combined"])
                rows.append(row)
                session.append(row["plain"][0]["ids"])
                c, pl = row["combined"], row["plain"]
                print(f"{mid} {question[:40]!r}: {pl[0]['new']} tokens, forwards {pl[0]['forwards']} / "
                      f"{c[0]['forwards']}, decode CPU ms plain {[round(x['decode_cpu'] * 1e3) for x in pl]} combined "
                      f"{[round(x['decode_cpu'] * 1e3) for x in c]}, outside forwards plain "
                      f"{[round(x['other_cpu'] * 1e3, 1) for x in pl]} combined "
                      f"{[round(x['other_cpu'] * 1e3, 1) for x in c]}" + ("" if same else " NOT IDENTICAL"), flush=True)
            pc.close()
    _table(rows)
    for mode, prof in profs.items():
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.profile)
        print(f"\n## cProfile, {mode} (all timed requests)\n{out.getvalue()}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()
