"""``percache bench memory``: personal memory on LoCoMo (SmolLM2-135M).

One conversation (``--sample``, default 4: kept aside; the settings were chosen on samples
0-3) is replayed session by session (:mod:`.memory_replay`): the session's first speaker talks
through ``pc.chat`` with memory recall on (``--chat-new`` tokens per reply; the recall path is
timed), then the session's dialogue turns (both speakers', LoCoMo's own) are queued for
idle-time extraction, and an idle phase (``pc.idle()``) runs, once with
``memory_extraction="raw"`` (each turn a memory item) and once with ``"model"`` (constrained
extraction, one call per turn, ``--batch`` turns per idle task; ``--free`` for the unconstrained
``memory_facts`` template instead; facts not grounded in their turn are dropped,
``--grounding``). Then a stratified, seeded sample of the questions whose evidence lies in the
replayed sessions is answered by these methods:

- ``full``: the whole replayed transcript (truncated to the model's window), as one chunk
  (its K/V is computed once and reused exactly by the later questions);
- ``window``: the last turns that fit ``--window`` tokens;
- ``raw``, ``facts``: the ``--k`` best memory items of that kind (a fact is shown with the date
  of the session it came from; a raw turn carries it already); facts are indexed with their
  source turn as retrieval context (``Config.memory_context_keys``);
- ``facts, text keys``: the same facts indexed by their own text only;
- ``facts+raw``: facts and raw turns in one ranking, a fact and its own source turn taking one
  slot of the ``k`` (:func:`percache_plugin.memory.fusion.one_slot_per_source`);
  ``facts+raw, unfused``: the same ranking's first ``k`` items, so both may take a slot;
- ``facts=raw tokens``: the best facts while their tokens fit the raw-turn context's tokens of
  the same question (recall at equal prompt tokens).

Reported per category: evidence recall@k (a retrieved item's sources are the dialogue ids it
came from), answer token F1 (categories 1-4), the share of adversarial questions (category 5)
answered as unanswerable, prompt tokens and latency per answer; extraction quality against
LoCoMo's ``observation`` facts (:mod:`.memory_match`: cosine and token-F1 rules, thresholds
chosen on the other four conversations; also for the facts each grounding threshold of
:data:`GROUNDING_SWEEP` keeps, so a run with ``--grounding 0`` measures the check) and facts per
minute of idle time. ``--per-category 0`` stops after extraction.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..bundled import load_smollm2
from ..config import Config
from ..handle import PerCache, enable
from ..memory.fusion import one_slot_per_source
from ..memory.grounding import grounding
from ..segments import Segment
from .common import DEFAULT_LOCOMO, NO_CALIBRATION, THREADS_HELP, markdown_table, median, write_json
from .memory_data import (
    UNANSWERABLE,
    Conversation,
    QAItem,
    answer_f1,
    evidence_recall,
    load_conversation,
    sample_questions,
    says_unanswerable,
)
from .memory_match import attributed, calibrate, f1_matrix, match_matrix
from .memory_replay import replay

__all__ = ["add_arguments", "run"]

METHODS = ("full", "window", "raw", "facts", "facts, text keys", "facts+raw", "facts+raw, unfused",
           "facts=raw tokens")
GROUNDING_SWEEP = (0.0, 0.25, 0.5, 0.75)
SYSTEM = (f"Answer the question about the conversation in a few words. If the conversation "
          f"does not say, answer '{UNANSWERABLE}'.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", type=Path, default=DEFAULT_LOCOMO, help="LoCoMo JSON (locomo_dev5.json)")
    p.add_argument("--sample", type=int, default=4, help="conversation to report on (0-4)")
    p.add_argument("--sessions", type=int, default=5, help="sessions replayed")
    p.add_argument("--per-category", type=int, default=6, help="questions drawn per category")
    p.add_argument("--seed", type=int, default=0, help="seed of the question sample")
    p.add_argument("--batch", type=int, default=4, help="dialogue turns per extraction call")
    p.add_argument("--extract-tokens", type=int, default=96, help="tokens decoded per extraction call")
    p.add_argument("--window", type=int, default=512, help="sliding-window budget, tokens")
    p.add_argument("-k", type=int, default=5, help="memory items per answer (recall@k)")
    p.add_argument("--max-new", type=int, default=16, help="tokens decoded per answer")
    p.add_argument("--free", action="store_true", help="unconstrained extraction (memory_facts template)")
    p.add_argument("--grounding", type=float, default=Config().memory_grounding,
                   help="Config.memory_grounding (0: keep invented facts; the quality table then "
                        "shows every threshold of the sweep)")
    p.add_argument("--chat-new", type=int, default=8,
                   help="tokens each replayed message's reply decodes through pc.chat (0: no chat)")
    p.add_argument("--no-answer", action="store_true",
                   help="retrieval only: recall@k and context tokens, no answer generated (for dev runs)")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.add_argument("--json", type=Path, default=None)


def _sources(metadata: Any) -> list[str]:
    return [s.removeprefix("c:") for s in metadata.get("source", "").split(",") if s]


def _tokens(pc: PerCache, text: str) -> int:
    return len(pc.tokenizer(text + "\n", add_special_tokens=False)["input_ids"])


def _memory(pc: PerCache, conv: Conversation, scope: str, question: str, k: int,
            budget: int | None = None, fuse: bool = True) -> tuple[list[str], list[list[str]]]:
    """The ``k`` best items of ``scope`` (facts shown with their session's date), or with
    ``budget`` the best items (of up to ``4 k``) while their tokens fit it. In scope ``both``
    a fact and its own source turn take one slot unless ``fuse`` is False."""
    dates = {d: date for date, ts in conv.sessions for d, _ in ts}
    texts: list[str] = []
    sources: list[list[str]] = []
    used = 0
    fuse = fuse and scope == "both"
    hits = pc.memory.search(question, scope, k if budget is None and not fuse else 4 * k)
    if fuse:  # a fact and its own source turn take one slot
        hits = one_slot_per_source(hits, k).hits
    for h in hits:
        src = _sources(h.fact.metadata)
        raw = h.fact.metadata.get("kind") == "raw"
        text = h.fact.text if raw or not src else f"[{dates.get(src[0], '')}] {h.fact.text}"
        if budget is not None:
            used += _tokens(pc, text)
            if used > budget:
                break
        texts.append(text)
        sources.append(src)
    return texts, sources


def _context(pc: PerCache, conv: Conversation, method: str, question: str, k: int,
             window: int, raw_tokens: int) -> tuple[list[str], list[list[str]]]:
    """The context texts of one method and the dialogue ids each came from."""
    if method not in ("full", "window"):
        scope = {"raw": "raw", "facts": "facts", "facts, text keys": "facts_text_keys", "facts+raw": "both",
                 "facts+raw, unfused": "both", "facts=raw tokens": "facts"}[method]
        return _memory(pc, conv, scope, question, k, raw_tokens if method == "facts=raw tokens" else None,
                       fuse=method != "facts+raw, unfused")
    turns = [(d, f"[{date}] {text}") for date, ts in conv.sessions for d, text in ts]
    budget = window if method == "window" else 8192 - 256  # SmolLM2's window less the question
    kept: list[tuple[str, str]] = []
    used = 0
    for d, text in reversed(turns):
        n = _tokens(pc, text)
        if used + n > budget:
            break
        kept.insert(0, (d, text))
        used += n
    return ["\n".join(t for _, t in kept)], [[d for d, _ in kept]]


def _answer(pc: PerCache, texts: Sequence[str], question: str, max_new: int) -> tuple[str, int, float]:
    segments = [Segment(SYSTEM, "system"), *(Segment(t, "chunk") for t in texts),
                Segment(question, "query")]
    t0 = time.perf_counter()
    gen = pc.generate(segments, max_new_tokens=max_new, do_sample=False)
    return gen.text.strip(), gen.stats.prompt_tokens, time.perf_counter() - t0


def _evaluate(pc: PerCache, conv: Conversation, questions: list[QAItem], args: argparse.Namespace
              ) -> list[dict[str, Any]]:
    rows = []
    for i, q in enumerate(questions):
        raw_texts, _ = _memory(pc, conv, "raw", q.question, args.k)
        raw_tokens = sum(_tokens(pc, t) for t in raw_texts)
        for method in METHODS:
            texts, sources = _context(pc, conv, method, q.question, args.k, args.window, raw_tokens)
            if args.no_answer:  # context tokens only (SYSTEM and the question left out)
                answer, tokens, latency = "", sum(_tokens(pc, t) for t in texts), 0.0
            else:
                answer, tokens, latency = _answer(pc, texts, q.question, args.max_new)
            rows.append({"method": method, "category": q.category, "question": q.question,
                         "gold": q.answer, "answer": answer, "prompt_tokens": tokens,
                         "latency_s": latency, "recall": evidence_recall(q.evidence, sources),
                         "items": len(texts),
                         "f1": answer_f1(answer, q.answer) if q.category != 5 else None,
                         "unanswerable": says_unanswerable(answer)})
        print(f"  question {i + 1}/{len(questions)} (category {q.category}) answered", flush=True)
    return rows


def _table(rows: list[dict[str, Any]]) -> tuple[list[list[Any]], dict[str, Any]]:
    out, summary = [], {}
    for method in METHODS:
        mine = [r for r in rows if r["method"] == method]
        for cat in sorted({r["category"] for r in mine}) + ["all"]:
            sel = [r for r in mine if cat == "all" or r["category"] == cat]
            f1s = [r["f1"] for r in sel if r["f1"] is not None]
            adv = [r for r in sel if r["category"] == 5]
            cell = {"n": len(sel), "recall": float(np.mean([r["recall"] for r in sel])),
                    "f1": float(np.mean(f1s)) if f1s else None,
                    "unanswerable": (sum(r["unanswerable"] for r in adv) / len(adv)) if adv else None,
                    "prompt_tokens": float(np.mean([r["prompt_tokens"] for r in sel])),
                    "latency_s": median([r["latency_s"] for r in sel])}
            summary[f"{method}/{cat}"] = cell
            out.append([method, cat, cell["n"], f"{cell['recall']:.2f}",
                        "-" if cell["f1"] is None else f"{cell['f1']:.3f}",
                        "-" if cell["unanswerable"] is None else f"{cell['unanswerable']:.2f}",
                        f"{cell['prompt_tokens']:.0f}", f"{cell['latency_s']:.2f}"])
    return out, summary


def _targets(summary: dict[str, Any]) -> dict[str, Any]:
    """The acceptance targets, from the ``all`` rows (and category 5)."""
    full = summary["full/all"]
    out: dict[str, Any] = {"token_share": {m: summary[f"{m}/all"]["prompt_tokens"] / full["prompt_tokens"]
                                           for m in METHODS if m not in ("full", "window")}}
    raw = summary["raw/all"]["recall"]
    out["recall_vs_raw"] = {m: summary[f"{m}/all"]["recall"] - raw
                            for m in ("facts", "facts, text keys", "facts+raw", "facts+raw, unfused",
                                      "facts=raw tokens")}
    if "full/5" in summary:
        out["unanswerable_vs_full"] = {m: summary[f"{m}/5"]["unanswerable"] - summary["full/5"]["unanswerable"]
                                       for m in METHODS if m != "full"}
    return out


def _quality(pc: PerCache, facts: list[Any], conv: Conversation, dev: list[Conversation]
             ) -> dict[str, Any]:
    """Extraction precision/recall against the observations, both match rules."""
    emb = pc.embedder
    thresholds = calibrate(dev, emb.embed)
    texts, obs = [f.text for f in facts], [o for o, _ in conv.observations]
    cos = emb.embed(texts) @ emb.embed(obs).T if texts and obs else np.zeros((len(texts), len(obs)))
    f1 = f1_matrix(texts, obs)
    sources, turns = [_sources(f.metadata) for f in facts], [d for _, d in conv.observations]
    said = {d: text for _, ts in conv.sessions for d, text in ts}
    share = np.array([grounding(f.text, " ".join(said.get(s, "") for s in src)).share
                      for f, src in zip(facts, sources, strict=True)])
    cos_a, f1_a = attributed(cos, sources, turns), attributed(f1, sources, turns)
    sweep = {}
    for t in GROUNDING_SWEEP:  # the facts a grounding threshold t would have kept
        keep = share >= t
        sweep[str(t)] = {"facts": int(keep.sum()),
                         "cosine_attributed": match_matrix(cos_a[keep], thresholds["cosine"]),
                         "token_f1_attributed": match_matrix(f1_a[keep], thresholds["token_f1"])}
    return {"cosine": match_matrix(cos, thresholds["cosine"]),
            "token_f1": match_matrix(f1, thresholds["token_f1"]),
            "cosine_attributed": match_matrix(cos_a, thresholds["cosine"]),
            "token_f1_attributed": match_matrix(f1_a, thresholds["token_f1"]),
            "grounding_sweep": sweep, "calibration": thresholds}


def run(args: argparse.Namespace) -> dict[str, Any]:
    torch.set_num_threads(args.threads)
    conv = load_conversation(args.data, args.sample, args.sessions)
    dev = [load_conversation(args.data, s, args.sessions) for s in range(5) if s != args.sample]
    questions = sample_questions(conv.questions, args.per_category, args.seed)
    print(f"LoCoMo sample {args.sample} ({conv.sample_id}): {len(conv.sessions)} sessions, "
          f"{len(conv.questions)} questions with evidence in them, {len(questions)} drawn "
          f"(<= {args.per_category} per category, seed {args.seed})", flush=True)
    model, tok = load_smollm2()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="percache-bench-memory-") as store:
        pc = enable(model, tok, store=store, predict="off", use_qa_bank=False,
                    memory_extract_tokens=args.extract_tokens, prediction_quiet_s=0.0,
                    memory_extract_grammar=not args.free, memory_grounding=args.grounding,
                    **NO_CALIBRATION)
        extraction = replay(pc, conv, args.batch, args.chat_new)
        facts = pc.memory.list("facts")
        quality = _quality(pc, facts, conv, dev)
        rows = _evaluate(pc, conv, questions, args) if questions else []
        examples = [f"{f.metadata.get('source', '')}: {f.text}" for f in facts]
        pc.disable()
    table, summary = _table(rows)
    targets = _targets(summary) if rows else {}
    if rows:
        print(markdown_table(["method", "category", "n", f"recall@{args.k}", "F1", "unanswerable (cat 5)",
                              "prompt tokens", "latency s (median)"], table))
    print(f"extraction: {extraction}")
    print(f"vs LoCoMo observations: {quality}")
    print(f"targets: {targets}")
    print("first facts:", *examples[:12], sep="\n  ")
    print(f"run time (after loading the model): {time.perf_counter() - t_start:.0f} s")
    result = {"args": {k: str(v) for k, v in vars(args).items() if k != "func"}, "extraction": extraction,
              "quality": quality, "targets": targets, "summary": summary, "rows": rows,
              "examples": examples}
    write_json(args.json, result)
    return result
