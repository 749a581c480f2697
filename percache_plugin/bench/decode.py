"""``percache bench decode``: decode speed with verified drafts vs plain greedy decoding.

SmolLM2 answers QMSum questions the way ``ask()`` does (retrieve top-k chunks of the meeting,
generate over them). Per meeting: the original queries are asked first (their answers enter
the QA bank), then each hand-written paraphrase (benchmarks/data/qa_paraphrases.json) is
answered once per mode, side by side: plain decoding, drafts from the prompt only, from the
QA bank only (the stored answers of the nearest questions), from the session only (the answers
to the earlier paraphrases of the same meeting, as in a conversation), and from every source
(``combined``: as ``Config`` has it; ``chain``: every source, one draft per forward; ``tree``:
every source, token trees; ``fixed`` / ``online``: every source, with
``Config.draft_cost_online`` off / on; ``builtin``: every source, priced by the built-in verify
cost curve whatever the store holds). ``--calibrate`` measures the verify cost curve once
(``pc.measure_verify_cost()``) and stores it in every meeting's store before its handle is
enabled, so ``combined`` shows what a default handle on a store holding a measured curve does
(side by side with ``builtin``). The prompt's chunks are cached before the timed runs, so a request
is one token of prefill and ``--new-tokens`` of decoding. Two speeds are reported: the request's
(new tokens over the whole request's time) and the decode phase's (the tokens after the first
forward over the time after it: the prompt forward and the reuse path are time to first token,
reported as a ratio to plain). Each mode keeps its own draft history, and every round of an
answer starts from the state before it. Every drafted answer is checked token for token against
the plain one.

With ``--repeats R`` each answer is decoded R times per mode, the modes interleaved (plain
first in even rounds, last in odd ones); an answer's speed-up is the median over rounds of its
drafted speed over the plain speed of the same round (neighbours in time, so load drift between
rounds cancels), and its spread (lowest and highest round) is kept. The forward counts are
deterministic: an answer with more drafted forwards than plain ones is a real regression,
whatever the clock says.
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from ..decode.acceptance import AcceptanceHistory
from ..decode.sources import QA_BANK, SESSION, DraftHints
from ..rag.qmsum import Meeting, iter_meetings, meeting_text
from .common import DEFAULT_QMSUM, markdown_table, median, require_qmsum, write_json
from .decode_curve import calibrate_once, parse_curve, store_curve

__all__ = ["add_arguments", "run", "run_benchmark", "answer_row", "summarize", "MODES", "DEFAULT_MODES", "TREE"]

PARAPHRASES = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "qa_paraphrases.json"
MODES: dict[str, tuple[str, ...] | None] = {
    "prompt": ("prompt",), "qa_bank": (QA_BANK,), "session": (SESSION,), "combined": None,
    "chain": None, "tree": None, "fixed": None, "online": None, "builtin": None}
TREE: dict[str, bool] = {"chain": False, "tree": True}  # Config.draft_tree per mode (others: the default)
ONLINE: dict[str, bool] = {"fixed": False, "online": True}  # Config.draft_cost_online per mode (others: the default)
DEFAULT_MODES = ("prompt", "qa_bank", "session", "combined")


def _pairs(path: Path, meetings: int, questions: int, skip: int = 0) -> dict[str, list[tuple[str, str]]]:
    """Meetings with the most paraphrases first (ties in file order), the first ``skip`` left out."""
    pairs = json.loads(path.read_text())["pairs"]
    by: dict[str, list[tuple[str, str]]] = {}
    for p in pairs:
        by.setdefault(p["meeting"], []).append((p["query"], p["paraphrase"]))
    chosen = dict(sorted(by.items(), key=lambda kv: -len(kv[1]))[skip:skip + meetings])
    out, n = {}, 0
    for mid, qs in chosen.items():
        take = qs[:max(0, questions - n)]
        if take:
            out[mid] = take
            n += len(take)
    return out


def _meetings(data: Path, ids: set[str]) -> dict[str, Meeting]:
    return {m.id: m for m in iter_meetings(data) if m.id in ids}


def _timed(pc: Any, segments: Any, n: int, hints: DraftHints, mode: str, tree_default: bool,
           online_default: bool, cost_default: tuple[float, ...] | None = None) -> dict[str, Any]:
    if mode == "plain":
        pc.configure(drafting=False)
    else:
        builtin = pc.engine.drafts.builtin(pc.config).ratios if mode == "builtin" else None
        pc.configure(drafting=True, draft_sources=MODES[mode], draft_tree=TREE.get(mode, tree_default),
                     draft_cost_online=ONLINE.get(mode, online_default), draft_verify_cost=builtin or cost_default)
    t0 = time.perf_counter()
    gen = pc.generate(segments, max_new_tokens=n, do_sample=False, drafts=hints)
    s = gen.stats
    return {"ids": gen.token_ids, "curve": s.draft_cost_curve, "s": time.perf_counter() - t0, "new": s.new_tokens,
            "forwards": s.decode_forwards or s.new_tokens, "drafted": s.tokens_drafted,
            "accepted": s.tokens_accepted, "reused": s.tokens_reused, "trees": s.draft_tree_forwards,
            "ttft": s.ttft_s, "decode_s": s.total_s - s.ttft_s, "first": s.first_forward_tokens}


def _decode_ratio(plain: dict[str, Any], run: dict[str, Any]) -> float | None:
    """Decode speed (tokens after the first forward over the time after it) of ``run`` over
    ``plain``'s; None when either has no such tokens or time (or was not timed that way)."""
    if "decode_s" not in plain or "decode_s" not in run:
        return None
    p_tok, r_tok = plain["new"] - plain["first"], run["new"] - run["first"]
    if min(p_tok, r_tok) <= 0 or min(plain["decode_s"], run["decode_s"]) <= 0:
        return None
    return (r_tok / run["decode_s"]) / (p_tok / plain["decode_s"])


def _clean_history(pc: Any, mode: str, start: dict[str, AcceptanceHistory]) -> None:
    """Give the handle a copy of ``mode``'s draft history as it stood before this answer: every
    mode and round starts from its own state, unmoved by other modes or earlier rounds."""
    pc.engine.draft_history = copy.deepcopy(start.setdefault(mode, AcceptanceHistory()))


def answer_row(runs: dict[str, list[dict[str, Any]]], modes: tuple[str, ...]) -> dict[str, Any]:
    """One answer's figures from its timed runs per mode (round ``r`` of every mode at index ``r``):
    per mode the median tok/s, and for drafting modes the median over rounds of the speed-up
    against that round's plain run, its lowest and highest round, and the forward counts."""
    plain = runs["plain"]
    plain_ids = plain[0]["ids"]
    row: dict[str, Any] = {}
    for mode, rs in runs.items():
        row[mode] = {"identical": all(x["ids"] == plain_ids for x in rs), "curve": rs[0].get("curve", ""),
                     "tok_s": median([x["new"] / x["s"] for x in rs]),
                     "forwards": rs[0]["forwards"], "drafted": rs[0]["drafted"],
                     "accepted": rs[0]["accepted"], "trees": rs[0].get("trees", 0)}
    for mode in modes:
        ratios = [p["s"] / x["s"] * x["new"] / p["new"] for p, x in zip(plain, runs[mode], strict=True)]
        row[mode].update(speedup=median(ratios), speedup_low=min(ratios), speedup_high=max(ratios),
                         more_forwards=row[mode]["forwards"] > row["plain"]["forwards"])
        dec = [r for r in (_decode_ratio(p, x) for p, x in zip(plain, runs[mode], strict=True)) if r is not None]
        ttft = [x["ttft"] / p["ttft"] for p, x in zip(plain, runs[mode], strict=True)
                if p.get("ttft", 0) > 0 and "ttft" in x]
        row[mode].update(decode_speedup=median(dec) if dec else None, decode_low=min(dec, default=None),
                         decode_high=max(dec, default=None), ttft_ratio=median(ttft) if ttft else None,
                         first=runs[mode][0].get("first", 1))
    return row


def summarize(rows: list[dict[str, Any]], modes: tuple[str, ...]) -> dict[str, Any]:
    """Medians and counts over the answers (``answer_row`` rows)."""
    summary: dict[str, Any] = {m: {
        "median_speedup": median([r[m]["speedup"] for r in rows]),
        "min_speedup": min(r[m]["speedup"] for r in rows),
        "slower_than_5pct": sum(r[m]["speedup"] < 0.95 for r in rows),
        # every round of the answer more than 5% slower: not the noise of one round
        "slower_every_round": sum(r[m]["speedup_high"] < 0.95 for r in rows),
        "more_forwards_than_plain": sum(r[m]["forwards"] > r["plain"]["forwards"] for r in rows),
        "median_tok_s": median([r[m]["tok_s"] for r in rows]),
        "acceptance": (sum(r[m]["accepted"] for r in rows) / max(1, sum(r[m]["drafted"] for r in rows))),
        "forwards": sum(r[m]["forwards"] for r in rows),
        "tree_forwards": sum(r[m].get("trees", 0) for r in rows),
        "not_identical": sum(not r[m]["identical"] for r in rows),
        # decode phase only: the tokens after the first forward over the time after it
        **_decode_summary([r[m] for r in rows])} for m in modes}
    summary["plain"] = {"median_tok_s": median([r["plain"]["tok_s"] for r in rows]),
                        "forwards": sum(r["plain"]["forwards"] for r in rows)}
    return summary


def _decode_summary(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Decode-phase figures of one mode over its answers' cells (``answer_row``)."""
    dec = [c["decode_speedup"] for c in cells if c.get("decode_speedup") is not None]
    ttft = [c["ttft_ratio"] for c in cells if c.get("ttft_ratio") is not None]
    return {"median_decode_speedup": median(dec) if dec else None, "min_decode_speedup": min(dec, default=None),
            "decode_slower_than_5pct": sum(d < 0.95 for d in dec),
            "decode_slower_every_round": sum(c["decode_high"] < 0.95 for c in cells if c.get("decode_high") is not None),
            "decode_answers": len(dec), "median_ttft_ratio": median(ttft) if ttft else None}


def _trace(pc: Any, segments: Any, hints: DraftHints, plain_ids: list[int]) -> dict[str, Any]:
    """What a drafted decoding of this request starts from, for an offline replay of schedules
    (``benchmarks/draft_replay.py``): the prompt, the draft sources, the plain greedy output."""
    prompt = pc.prompt(segments)
    sources = pc.hooks.draft_sources(pc.engine.ctx, prompt, hints)
    return {"prompt": list(prompt.input_ids), "plain": plain_ids,
            "sources": [{"name": s.name, "anchored": s.anchored, "sequences": [list(q) for q in s.sequences]}
                        for s in sources]}


def run_benchmark(model: Any, tok: Any, data: Path, *, meetings: int, questions: int, new_tokens: int,
                  repeats: int, progress: bool = True, partial: Path | None = None, skip: int = 0,
                  modes: tuple[str, ...] = DEFAULT_MODES, trace: bool = False,
                  verify_cost: tuple[float, ...] | None = None, calibrate: bool = False) -> dict[str, Any]:
    """Every question in every mode of ``modes`` (and plain); ``partial`` receives the rows so far
    after each question; ``trace`` keeps each request's replay inputs in its row; ``verify_cost``
    is ``Config.draft_verify_cost`` (None: the default curve); ``calibrate`` measures the curve
    once and stores it in every meeting's store first."""
    import percache_plugin as percache

    from ..assistant.ask import qa_drafts, segments_for

    unknown = set(modes) - set(MODES)
    if unknown:
        raise ValueError(f"unknown decode modes {sorted(unknown)}; choose from {sorted(MODES)}")
    plan = _pairs(PARAPHRASES, meetings, questions, skip)
    found = _meetings(data, set(plan))
    rows: list[dict[str, Any]] = []
    calibration: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        if calibrate:
            calibration = calibrate_once(model, tok, Path(tmp) / "calibration")
        for mid, qs in plan.items():
            if calibration is not None:  # the store holds the curve before its handle opens
                store_curve(Path(tmp) / mid, model, calibration)
            pc = percache.enable(model, tok, store=Path(tmp) / mid, drafting=False,
                                draft_verify_cost=verify_cost)
            tree_default, online_default = pc.config.draft_tree, pc.config.draft_cost_online
            pc.add_documents({"text": meeting_text(found[mid]), "id": mid})
            for original, _ in qs:  # earlier questions: their answers enter the QA bank
                pc.ask(original, max_new_tokens=new_tokens)
            session: list[list[int]] = []
            histories: dict[str, AcceptanceHistory] = {}  # each mode's own draft history (fair modes)
            for _, question in qs:
                q = pc.assistant.query(question)
                chunks = pc.hooks.retrieve(pc.assistant.ctx, q, pc.config.top_k, None)
                segments = segments_for(pc.config.system_prompt, question, chunks)
                qa = qa_drafts(pc.assistant, q, None)
                hints = DraftHints(texts=qa.texts, token_ids={SESSION: list(session)})
                # Untimed: cache the chunks (no draft source, so no draft history either), and
                # (once per handle) pack the linear weights for drafted decoding
                # (Config.draft_packed_linears): a one-time cost per handle, not per answer.
                pc.configure(drafting=True, draft_sources=())
                pc.engine.draft_history = AcceptanceHistory()  # scratch: no mode's history
                pc.generate(segments, max_new_tokens=2, do_sample=False)
                pc.engine.pack_linears()
                runs: dict[str, list[dict[str, Any]]] = {}
                after: dict[str, AcceptanceHistory] = {}
                for r in range(repeats):
                    order = ["plain", *modes] if r % 2 == 0 else [*modes[::-1], "plain"]
                    for mode in order:
                        _clean_history(pc, mode, histories)
                        runs.setdefault(mode, []).append(_timed(pc, segments, new_tokens, hints, mode, tree_default,
                                                                  online_default, verify_cost))
                        after[mode] = pc.engine.draft_history
                histories.update(after)  # every round of a mode ends in the same state (deterministic)
                plain_ids = runs["plain"][0]["ids"]
                row: dict[str, Any] = {"meeting": mid, "question": question, "new": runs["plain"][0]["new"],
                                       "qa_answers": len(qa.texts.get(QA_BANK, ())), "turns": len(session),
                                       **answer_row(runs, modes)}
                if trace:
                    row["trace"] = _trace(pc, segments, hints, plain_ids)
                rows.append(row)
                write_json(partial, {"rows": rows})
                session.append(plain_ids)
                if progress:
                    print(f"{mid} {question[:40]!r} ({row['plain']['forwards']} forwards): " + " ".join(
                        f"{m}={row[m]['speedup']:.2f}x [{row[m]['speedup_low']:.2f}-{row[m]['speedup_high']:.2f}] "
                        f"decode {_x(row[m]['decode_speedup'])} ttft {_x(row[m]['ttft_ratio'])} "
                        f"{row[m]['forwards']}f" for m in modes)
                        + ("" if all(row[m]["identical"] for m in modes) else " NOT IDENTICAL"), flush=True)
            pc.close()
    summary = summarize(rows, modes)
    return {"rows": rows, "summary": summary, "questions": len(rows), "meetings": list(plan), "skip": skip,
            "verify_cost": list(verify_cost) if verify_cost else None, "calibration": calibration,
            "curves": {m: sorted({r[m]["curve"] for r in rows}) for m in modes}, "new_tokens": new_tokens, "repeats": repeats, "threads": torch.get_num_threads()}


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM, help="QMSum data folder")
    p.add_argument("--meetings", type=int, default=5, help="meetings (those with most paraphrases first)")
    p.add_argument("--skip", type=int, default=0,
                   help="leave out the first N meetings of that order (a split disjoint from the first N)")
    p.add_argument("--modes", default=",".join(DEFAULT_MODES),
                   help=f"comma-separated drafting modes beside plain decoding (of {', '.join(MODES)}; "
                        "combined follows Config.draft_tree, chain and tree set it)")
    p.add_argument("--trace", action="store_true",
                   help="keep each request's prompt, draft sources and plain output in the JSON (for replays)")
    p.add_argument("--questions", type=int, default=20, help="paraphrased questions in all")
    p.add_argument("--new-tokens", type=int, default=64, help="tokens decoded per answer")
    p.add_argument("--repeats", type=int, default=3,
                   help="timed runs per question and mode, interleaved; an answer's speed-up is the median "
                        "over rounds of drafted over plain speed in the same round")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    p.add_argument("--verify-cost", default=None,
                   help="Config.draft_verify_cost as comma-separated ratios for k = 1, 2, ... (what a "
                        "forward verifying k draft tokens costs in one-token forwards on this machine; "
                        "benchmarks/verify_cost.py or benchmarks/decode_overhead.py measure it); "
                        "default: the built-in curve")
    p.add_argument("--calibrate", action="store_true",
                   help="measure the verify cost curve once (pc.measure_verify_cost()) and store it in every "
                        "meeting's store before its handle opens: 'combined' then prices drafts by it, "
                        "'builtin' by the built-in curve")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from ..bundled import load_smollm2

    require_qmsum(args.data)
    modes = tuple(m for m in args.modes.split(",") if m)
    torch.set_num_threads(args.threads)
    model, tok = load_smollm2(status=True)
    payload = run_benchmark(model, tok, args.data, meetings=args.meetings, questions=args.questions,
                            new_tokens=args.new_tokens, repeats=args.repeats, partial=args.json,
                            skip=args.skip, modes=modes, trace=args.trace, verify_cost=parse_curve(args.verify_cost),
                            calibrate=args.calibrate)
    s = payload["summary"]
    print(markdown_table(
        ["mode", "median request tok/s", "median speed-up (request)", "min", "answers >5% slower",
         "slower in every round", "median decode speed-up (after the first forward)", "min",
         "answers >5% slower", "slower in every round", "TTFT vs plain", "more forwards than plain",
         "acceptance", "forwards", "tree forwards"],
        [["plain", f"{s['plain']['median_tok_s']:.1f}", "1.00x", "", "", "", "1.00x", "", "", "", "", "", "",
          s["plain"]["forwards"], ""],
         *[[m, f"{s[m]['median_tok_s']:.1f}", f"{s[m]['median_speedup']:.2f}x", f"{s[m]['min_speedup']:.2f}x",
            s[m]["slower_than_5pct"], s[m]["slower_every_round"], _x(s[m]["median_decode_speedup"]),
            _x(s[m]["min_decode_speedup"]), s[m]["decode_slower_than_5pct"], s[m]["decode_slower_every_round"],
            _x(s[m]["median_ttft_ratio"]), s[m]["more_forwards_than_plain"],
            f"{s[m]['acceptance']:.0%}", s[m]["forwards"], s[m]["tree_forwards"]] for m in modes]]))
    if payload["calibration"] is not None:
        c = payload["calibration"]
        print(f"measured curve ({c['seconds']} s): {', '.join(f'{r:.2f}' for r in c['ratios'])}")
    print("curves used: " + "; ".join(f"{m}: {', '.join(payload['curves'][m])}" for m in modes))
    differ = sum(s[m]["not_identical"] for m in modes)
    print(f"{payload['questions']} questions over meetings {', '.join(payload['meetings'])}, {args.new_tokens} new "
          f"tokens, {args.threads} thread(s), {args.repeats} interleaved round(s) per answer (speed-ups: medians "
          f"of same-round ratios); drafted answers differing from the plain one: {differ}")
    write_json(args.json, payload)
    return payload
