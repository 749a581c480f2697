"""``percache bench qa``: QA-bank lookup latency (embed + retrieval + search + guards).

Fills an on-disk QA bank with ``--entries`` synthetic questions (templates over people,
topics, events and times; embedded in batches, not timed), then times ``--lookups``
requests as the engine serves them: embed the question once, retrieve its top-k chunks
from a hybrid index of real QMSum transcript chunks (for the consistency guard), and look
it up with every guard on. Half the requests reword a stored question (expected hits),
half are new questions (misses). Percentiles are over single requests, after a warm-up.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..rag.embeddings import Embedder, load_embedder
from ..rag.guards import DEFAULT_MIN_OVERLAP, DEFAULT_TAU
from ..rag.index import HybridIndex
from ..rag.qa_bank import QABank
from ..rag.qmsum import chunk_meeting, iter_meetings
from .common import DEFAULT_QMSUM, markdown_table, require_qmsum, write_json

__all__ = ["add_arguments", "run", "synthetic_questions"]

_PEOPLE = tuple(
    "Anna, Ben, Carla, David, Elena, Farid, Grace, Hiro, Ines, Jonas, Kemi, Lars, Maya, "
    "Nikhil, Olga, Pablo, Quinn, Rosa, Sam, Tariq, my manager, the landlord, "
    "the dentist, my sister, the coach".split(", ")
)
_TOPICS = tuple(
    "budget, roadmap, hiring plan, quarterly report, marketing campaign, "
    "server migration, holiday schedule, insurance claim, kitchen renovation, "
    "car repair, school trip, tax return, new contract, office move, product launch, "
    "design review, customer complaint, training course, wedding menu, garden project, "
    "research grant, conference talk, security audit, user survey, pricing change, "
    "battery supplier, remote control prototype, volunteer rota, book club pick, "
    "rent increase".split(", ")
)
_EVENTS = tuple(
    "team meeting, dentist appointment, parent evening, choir rehearsal, flight, "
    "project review, birthday dinner, yoga class, job interview, board meeting, "
    "football match, doctor visit, piano lesson, sprint demo, book club".split(", ")
)
_TIMES = tuple(
    "last week, yesterday, this morning, on Monday, in March, before the holidays, "
    "at the last meeting, in the email thread, this quarter, on Friday".split(", ")
)
_TEMPLATES = (
    "What did {p} say about the {t} {w}?",
    "When is the {e} with {p}?",
    "Who is responsible for the {t} after the {e}?",
    "How much did the {t} cost {w}?",
    "What was decided about the {t} {w}?",
    "Where is the {e} that {p} mentioned {w}?",
    "Why did {p} object to the {t}?",
    "Summarize what {p} wrote about the {t} {w}.",
)
_REWORDINGS = (  # how a user might ask the same again
    ("What did {p} say about", "What did {p} tell us about"),
    ("When is the", "What time is the"),
    ("Who is responsible for", "Who is in charge of"),
    ("How much did the", "What was the price of the"),
    ("What was decided about", "What decision was made on"),
    ("Where is the", "Where will the"),
    ("Why did {p} object to", "Why was {p} against"),
    ("Summarize what {p} wrote about", "Give me a summary of what {p} wrote about"),
)


def synthetic_questions(n: int, seed: int = 0) -> list[tuple[int, dict[str, str]]]:
    """``n`` distinct (template index, slot values) pairs, drawn reproducibly."""
    rng = np.random.default_rng(seed)
    seen: set[str] = set()
    out: list[tuple[int, dict[str, str]]] = []
    while len(out) < n:
        t = int(rng.integers(len(_TEMPLATES)))
        slots = {
            "p": _PEOPLE[rng.integers(len(_PEOPLE))],
            "t": _TOPICS[rng.integers(len(_TOPICS))],
            "e": _EVENTS[rng.integers(len(_EVENTS))],
            "w": _TIMES[rng.integers(len(_TIMES))],
        }
        text = _TEMPLATES[t].format(**slots)
        if text not in seen:
            seen.add(text)
            out.append((t, slots))
    return out


def _text(template: int, slots: dict[str, str], reworded: bool = False) -> str:
    text = _TEMPLATES[template]
    if reworded:
        text = text.replace(*_REWORDINGS[template])
    return text.format(**slots)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--entries", type=int, default=10_000, help="stored questions")
    p.add_argument(
        "--lookups", type=int, default=200, help="timed requests (half rewordings, half new)"
    )
    p.add_argument("--scopes", type=int, default=1, help="spread entries over this many scopes")
    p.add_argument("--embedder", default=None, help="embedder spec (default: all-MiniLM-L6-v2)")
    p.add_argument(
        "--data", type=Path, default=DEFAULT_QMSUM, help="QMSum folder (knowledge-bank chunks)"
    )
    p.add_argument(
        "--kb-meetings", type=int, default=2, help="QMSum test meetings in the knowledge bank"
    )
    p.add_argument(
        "--check-k", type=int, default=3, help="chunks retrieved for the consistency guard"
    )
    p.add_argument("--tau", type=float, default=DEFAULT_TAU, help="similarity threshold")
    p.add_argument("--threads", type=int, default=1, help="torch threads for the embedder")
    p.add_argument("--json", type=Path, default=None, help="write the results here")


def _pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs) * 1000, q)) if xs else float("nan")


class _Requests:
    """Serves requests the way the engine does: embed once, retrieve, look up."""

    def __init__(
        self, embedder: Embedder, index: HybridIndex, bank: QABank, args: argparse.Namespace
    ) -> None:
        self.embedder, self.index, self.bank, self.args = embedder, index, bank, args

    def lookup(self, text: str, vector: np.ndarray, scope: str, tau: float) -> str | None:
        retrieved = [h.chunk_id for h in self.index.search(text, vector, self.args.check_k)]
        result = self.bank.lookup(
            text,
            tau=tau,
            scope=scope,
            retrieved=retrieved,
            min_overlap=DEFAULT_MIN_OVERLAP,
            embedding=vector,
        )
        return None if result.match is None else result.match.entry.question

    def timed(self, text: str, scope: str) -> tuple[str | None, list[float]]:
        """Served question (or None) and [total, embed, retrieve, lookup] seconds."""
        t0 = time.perf_counter()
        vector = self.embedder.embed([text])[0]
        t1 = time.perf_counter()
        retrieved = [h.chunk_id for h in self.index.search(text, vector, self.args.check_k)]
        t2 = time.perf_counter()
        result = self.bank.lookup(
            text,
            tau=self.args.tau,
            scope=scope,
            retrieved=retrieved,
            min_overlap=DEFAULT_MIN_OVERLAP,
            embedding=vector,
        )
        t3 = time.perf_counter()
        served = None if result.match is None else result.match.entry.question
        return served, [t3 - t0, t1 - t0, t2 - t1, t3 - t2]


def _knowledge_bank(embedder: Embedder, args: argparse.Namespace) -> tuple[HybridIndex, list[str]]:
    meetings = list(iter_meetings(args.data, "test"))[: args.kb_meetings]
    chunks = [c for m in meetings for c in chunk_meeting(m, scope="kb")]
    index = HybridIndex(embedder.dim)
    index.add(chunks, embedder.embed([c.text for c in chunks]))
    return index, [c.id for c in chunks]


def _latency_rows(timings: dict[str, list[list[float]]]) -> tuple[dict[str, Any], list[list[Any]]]:
    summary: dict[str, Any] = {}
    rows = []
    for name, runs in (
        ("hit", timings["hit"]),
        ("miss", timings["miss"]),
        ("all", timings["hit"] + timings["miss"]),
    ):
        total, emb, ret, look = (
            (list(p) for p in zip(*runs, strict=True)) if runs else ([], [], [], [])
        )
        r = summary[name] = {
            "n": len(total),
            "p50_ms": _pct(total, 50),
            "p95_ms": _pct(total, 95),
            "embed_p50_ms": _pct(emb, 50),
            "retrieve_p50_ms": _pct(ret, 50),
            "lookup_p50_ms": _pct(look, 50),
            "lookup_p95_ms": _pct(look, 95),
        }
        rows.append(
            [
                name,
                r["n"],
                f"{r['p50_ms']:.1f}",
                f"{r['p95_ms']:.1f}",
                f"{r['embed_p50_ms']:.1f}",
                f"{r['retrieve_p50_ms']:.2f}",
                f"{r['lookup_p50_ms']:.2f}",
                f"{r['lookup_p95_ms']:.2f}",
            ]
        )
    return summary, rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    require_qmsum(args.data)
    import torch

    torch.set_num_threads(args.threads)
    embedder = load_embedder(args.embedder)
    index, chunk_ids = _knowledge_bank(embedder, args)
    drawn = synthetic_questions(args.entries + args.lookups // 2, seed=0)
    stored, fresh = drawn[: args.entries], drawn[args.entries :]
    texts = [_text(t, s) for t, s in stored]
    t0 = time.perf_counter()
    vectors = embedder.embed(texts)
    fill_embed_s = time.perf_counter() - t0
    rng = np.random.default_rng(1)
    n_reworded = args.lookups - len(fresh)
    probes: list[tuple[str, int | None]] = [(_text(t, s, reworded=True), i) for i, (t, s) in enumerate(stored[:n_reworded])]
    probes += [(_text(t, s), None) for t, s in fresh]
    scope_of = [f"user-{(target or 0) % args.scopes}" for _, target in probes]
    with tempfile.TemporaryDirectory(prefix="percache-bench-qa-") as tmp:
        bank = QABank(Path(tmp) / "percache.sqlite3", embedder, byte_limit=None)
        t0 = time.perf_counter()
        for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
            sources = [chunk_ids[j] for j in rng.choice(len(chunk_ids), 3, replace=False)]
            if i < n_reworded:  # the requests' targets get the chunks their wording retrieves
                sources = [h.chunk_id for h in index.search(text, vector, args.check_k)]
            bank.add(
                text,
                f"answer {i}",
                scope=f"user-{i % args.scopes}",
                sources=sources,
                embedding=vector,
            )
        fill_s = time.perf_counter() - t0
        requests = _Requests(embedder, index, bank, args)
        for j in range(10):  # warm-up: model, HNSW build, SQLite pages
            requests.timed(probes[j][0], scope_of[j])
        timings: dict[str, list[list[float]]] = {"hit": [], "miss": []}
        right, wrong = 0, []
        for j in tqdm(rng.permutation(len(probes)), desc="bench qa lookups", unit="lookup",
                      disable=None):
            (text, target), scope = probes[j], scope_of[j]
            served, times = requests.timed(text, scope)
            timings["miss" if served is None else "hit"].append(times)
            if served is not None and target is not None and served == texts[target]:
                right += 1
            elif served is not None:
                wrong.append({"asked": text, "served": served})
        # Untimed: how many of the new questions get some stored answer, by threshold.
        new = [
            (text, scope)
            for (text, target), scope in zip(probes, scope_of, strict=True)
            if target is None
        ]
        new_vectors = embedder.embed([text for text, _ in new])
        served_new = {
            tau: sum(
                requests.lookup(t, v, s, tau) is not None
                for (t, s), v in zip(new, new_vectors, strict=True)
            )
            for tau in (0.70, 0.74, 0.76, 0.78, 0.80, 0.82, 0.86)
        }
        bank.close()
    summary, rows = _latency_rows(timings)
    result: dict[str, Any] = {
        "embedder": embedder.name,
        "entries": args.entries,
        "scopes": args.scopes,
        "lookups": len(probes),
        "right_hits": right,
        "wrong_hits": len(wrong),
        "wrong_hit_examples": wrong[:20],
        "new_questions_served_by_tau": served_new,
        "kb_chunks": len(chunk_ids),
        "threads": args.threads,
        "tau": args.tau,
        "fill_embed_s": fill_embed_s,
        "fill_store_s": fill_s,
        **summary,
    }
    print(
        f"{args.entries} entries in {args.scopes} scope(s), {embedder.name}, {args.threads} thread(s), "
        f"tau {args.tau}; fill: embed {fill_embed_s:.1f} s, store {fill_s:.1f} s; hits: {right} right "
        f"(of {n_reworded} rewordings), {len(wrong)} wrong (of {len(new)} new questions)"
    )
    print(
        markdown_table(
            [
                "requests",
                "n",
                "p50 ms",
                "p95 ms",
                "embed p50",
                "retrieve p50",
                "lookup p50",
                "lookup p95",
            ],
            rows,
        )
    )
    print(
        "new questions served some stored answer, by tau: "
        + ", ".join(f"{t:.2f}: {n}/{len(new)}" for t, n in served_new.items())
    )
    write_json(args.json, result)
    return result
