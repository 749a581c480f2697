"""``percache demo``: the default assistant on the bundled small demo model, or on yours
(``--model PATH_OR_ID``).

1. Exact K/V reuse: the same question over the same notes, answered twice.
2. The assistant: the notes go into the knowledge bank, an idle phase predicts questions
   and prepares answers, then questions are answered from the QA bank or generated.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from .cli_errors import UsageError
from .handle import PerCache, enable
from .rag.grounding import check_grounding

__all__ = ["add_arguments", "run", "SAMPLE_CHUNKS", "SYSTEM"]

SYSTEM = "You are a personal assistant. Answer briefly from the user's notes."
SAMPLE_CHUNKS = (
    "Mail from Ana (Mon): The choir rehearsal moved from Thursday to Friday at 6 pm, "
    "in the small hall of the community centre. Bring the new sheet music.",
    "Meeting notes (Tue): Budget review with Ben. Travel costs are 12% over plan; Ben will "
    "send revised numbers by Wednesday noon. Next review is on the 14th.",
    "Chat with Carl (Wed): Carl borrowed the projector for the rehearsal and will return it "
    "on Saturday morning. He asked whether Dana is joining.",
)
QUESTION = "When and where is the choir rehearsal?"
QUESTIONS = (QUESTION, "Where and when does the choir rehearse?", "Who borrowed the projector?")
OFF_TOPIC = "Who won the football world cup in 2018?"


BUNDLED = "smollm2"
INTRO = ("The demo runs SmolLM2-135M-Instruct, a small demo model (135M parameters, bundled, runs on a "
         "laptop CPU; expect a small model's answers). Run the same demo on your own model with "
         "'percache demo --model PATH_OR_ID' (a local folder or a hub id in the offline cache).")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=BUNDLED,
                   help="a local Hugging Face model folder or a hub id already in the offline cache "
                        "(default: the bundled small demo model SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16", "auto"),
                   help="dtype to load --model in")
    p.add_argument("--store", type=Path, default=None, help="store directory (default: a temporary one)")
    p.add_argument("--max-new-tokens", type=int, default=40, help="tokens generated per answer (default 40)")
    p.add_argument("--idle-budget", type=float, default=60.0,
                   help="seconds of idle-time work (stops at the next token once spent)")


def _exact_reuse(pc: PerCache, max_new: int) -> None:
    print("== 1. Exact K/V reuse: the same question over the same notes, twice")
    segments = [SYSTEM, *SAMPLE_CHUNKS, QUESTION]
    print("Question:", QUESTION)
    first = "chunks already in the store" if pc.kv_cached(segments) else "cold store"
    for label in (first, "chunks cached"):
        g = pc.generate(segments, max_new_tokens=max_new, do_sample=False)
        s = g.stats
        print(f"[{label}] time to first token {s.ttft_s * 1000:.0f} ms, "
              f"tokens reused {s.tokens_reused}/{s.prompt_tokens}, computed {s.tokens_computed}")
        print("  Answer:", g.text.strip())


def _show(pc: PerCache, q: str, max_new: int) -> None:
    a = pc.ask(q, scope="me", max_new_tokens=max_new)
    if a.source == "qa_bank":
        how = (f"from the QA bank in {a.latency_s * 1000:.0f} ms (matched {a.matched_question!r}, "
               f"similarity {a.similarity:.2f})")
    elif a.source == "no_documents":
        how = "no relevant notes found: not answered from nothing"
    else:
        s = a.stats
        assert s is not None
        how = (f"generated in {a.latency_s:.1f} s, first token {s.ttft_s * 1000:.0f} ms, "
               f"reused {s.tokens_reused + s.tokens_shifted}/{s.prompt_tokens} prompt tokens")
    print(f"\nQ: {q}\n  {how}\n  A: {a.text}")
    if a.unsupported:
        print(f"  (not served to paraphrases: it names {'; '.join(a.unsupported)})")


def paraphrase(question: str) -> str:
    """A light rewording of a predicted question, as a user might type it."""
    q = question.rstrip("?").strip()
    for old, new in (("When is ", "when's "), ("What is ", "what's "), ("Who is ", "who's ")):
        if q.startswith(old):
            return new + q[len(old):] + "?"
    return q[0].lower() + q[1:] + " ?"


def _assistant(pc: PerCache, max_new: int, budget: float) -> None:
    print("\n== 2. The assistant: knowledge bank, idle-time prediction, QA bank")
    report = pc.add_documents(list(SAMPLE_CHUNKS), scope="me")
    print(notes_line(report.documents, len({c.doc_id for c in report.new_chunks})))
    print(f"Idle phase (budget {budget:.0f} s): predicting questions about each note and "
          "preparing their answers ...", flush=True)
    idle = pc.idle(budget_s=budget, progress=True)
    print(f"  {idle.summary()}")
    entries = [e for e in pc.qa_bank.entries(scope="me") if e.origin == "predicted"]
    answered = {e.question for e in entries if e.answer}
    predicted = list(dict.fromkeys([*idle.predicted, *(e.question for e in entries)]))
    print("  Questions predicted (their answers are prepared in idle time):")
    if not predicted and idle.remaining:
        predicted_note = (f"(none yet: the budget ran out with {idle.remaining} tasks left; "
                          "a slower or busy machine needs a larger --idle-budget)")
    else:
        predicted_note = "(none: the model's output held no usable question)"
    for q in predicted or [predicted_note]:
        print("   -", q, "" if q in answered or q == predicted_note else "[answer not prepared yet]")
    held = [e for e in pc.qa_bank.entries(scope="me") if e.origin == "predicted" and e.answer and e.stale]
    for e in held:
        reasons = check_grounding(e.answer or "", SAMPLE_CHUNKS).reasons()
        why = f"it names {'; '.join(reasons)}" if reasons else "a later answer contradicted it"
        print(f"  Held back, not served to paraphrases: {e.question!r} -> {e.answer!r}\n    ({why})")
    served = [e.question for e in pc.qa_bank.entries(scope="me")
              if e.origin == "predicted" and e.answer and not e.stale]
    if served:
        print("\nOne of them, asked in other words, is served from the cache:")
        _show(pc, paraphrase(served[0]), max_new)
    print("\nAnd the demo's own questions:")
    for q in QUESTIONS:
        _show(pc, q, max_new)
    print("\nA question the notes do not answer:")
    _show(pc, OFF_TOPIC, max_new)


def notes_line(received: int, new: int) -> str:
    """'Added 3 new notes.' / '0 new notes (3 already stored).'"""
    def notes(n: int) -> str:
        return f"{n} new note" + ("" if n == 1 else "s")

    if new == received:
        return f"Added {notes(new)}."
    return f"{notes(new)} ({received - new} already stored)."


def _load(name: str, dtype: str) -> tuple[object, object]:
    from .conformance.load import load_model

    if name == BUNDLED:
        print(INTRO, flush=True)
    else:
        if not Path(name).expanduser().exists() and name.startswith((".", "/", "~")):
            raise UsageError(f"no model at {name!r}", "give a local model folder (with config.json) "
                             "or a hub id already in the offline cache")
    try:
        return load_model(name, dtype=dtype, status=True)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot load {name!r}: {type(exc).__name__}: {exc}",
                         "give a local model folder (with config.json) or a hub id already in "
                         "the offline cache") from exc


def run(args: argparse.Namespace) -> None:
    model, tok = _load(args.model, args.dtype)
    with tempfile.TemporaryDirectory(prefix="percache-demo-") as tmp:
        store = args.store or Path(tmp)
        pc = enable(model, tok, store=store, reuse="shifted", background_max_new_tokens=32)
        print(f"percache enabled: {pc.capabilities.summary()}\nstore: {store}\n")
        _exact_reuse(pc, args.max_new_tokens)
        _assistant(pc, args.max_new_tokens, args.idle_budget)
        t = pc.stats()
        print(f"\nTotals: {t.requests} generations, {t.tokens_reused} prompt tokens reused exactly, "
              f"{t.tokens_shifted} shifted, {t.tokens_computed} computed; QA bank {t.qa_hits} hits "
              f"of {t.qa_lookups} lookups; {t.answers_flagged} of {t.answers_checked} generated "
              f"answers held back by the grounding check; {pc.store.total_bytes() / 1e6:.1f} MB of K/V stored "
              f"(see 'percache store info {store}')")
        pc.close()
