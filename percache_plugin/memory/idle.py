"""Extraction in idle time: the ``memory_extract`` idle task kind turns conversation turns into
facts (``Config.memory_extraction``).

A task carries the turns it covers (``{"session", "turns": [[turn id, text], ...]}`` as its
question) and the memory scope. ``"model"`` asks the model and keeps the valid lines
(:func:`.extract.parse_facts`; malformed ones, and facts copied from the template, are counted
and dropped): with ``Config.memory_extract_grammar`` (the default) once per turn, constrained to
the fact grammar (:mod:`.constrained`), each fact attributed to its turn; without it once per
task with the ``memory_facts`` template, each fact attributed to all the task's turns; ``"raw"`` stores each turn itself as a memory item, the fallback that needs no
extraction; ``"both"`` does both. Every fact gets ``metadata["source"]``: the
``session:turn`` ids it came from. A fact longer than ``Config.memory_fact_tokens`` allows
(:mod:`.limits`: a chat turn recalling it would not fit) is dropped and counted
(``too_long``). A model's fact mostly absent from its source turns is
dropped and counted (``Config.memory_grounding``, :mod:`.grounding`); a kept one carries its
source text as retrieval context (``metadata["context"]``, ``Config.memory_context_keys``).

Atomicity: the model runs first (a foreground request preempts it within one decode step:
``Preempted`` leaves the task queued and nothing stored); then every fact of the task is
written in one transaction (:meth:`MemoryBank.add_many`), so a crash stores all of them or
none. The task leaves the queue after that commit; a crash in between runs it again, and the
second run finds the same facts as duplicates (greedy decoding repeats its output).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..idle import IdleQueue, IdleReport, IdleTask
from ..predict.templates import load_template
from ..segments import Segment
from .bank import AddResult, MemoryBank
from .constrained import TurnGrammar, extract_turn
from .extract import Extracted, ParsedFacts, parse_facts, raw_turn_fact
from .fusion import sources
from .grounding import grounding
from .limits import fact_token_limit, fact_tokens
from .text import CONTEXT, normalize

if TYPE_CHECKING:
    from ..assistant.idle_context import IdleContext

__all__ = ["EXTRACT_KIND", "ExtractionStats", "extraction_session", "queue_turns", "run_extraction"]

EXTRACT_KIND = "memory_extract"
_SYSTEM = "You extract facts from conversations."


@dataclass
class ExtractionStats:
    """Extraction counters of one handle: turns read, model calls, facts stored (new),
    duplicates found, older facts superseded, malformed output lines dropped, facts dropped as
    ungrounded (:mod:`.grounding`: mostly absent from their source turns), tasks whose
    payload was unreadable, raw turns stored, facts dropped as longer than a fact may be
    (:mod:`.limits`, ``Config.memory_fact_tokens``), tasks whose facts the database refused to
    store (``write_errors``: nothing of the task stored, it stays queued and the error is raised;
    also counted in ``pc.stats().store_errors``), and seconds spent (for facts per minute)."""

    turns: int = 0
    model_calls: int = 0
    facts_added: int = 0
    duplicates: int = 0
    superseded: int = 0
    malformed: int = 0
    ungrounded: int = 0
    bad_tasks: int = 0
    raw_items: int = 0
    too_long: int = 0
    write_errors: int = 0
    seconds: float = 0.0


def queue_turns(queue: IdleQueue, session: str, turns: Sequence[tuple[int | str, str]],
                scope: str | None, *, delay_s: float = 0.0) -> bool:
    """Queue the extraction of ``turns`` (``(turn id, text)`` pairs, extracted together) of
    ``session`` into the memory scope ``scope``."""
    payload = json.dumps({"session": session, "turns": [[t, x] for t, x in turns]}, sort_keys=True)
    return queue.push(EXTRACT_KIND, payload, scope, delay_s=delay_s)


def extraction_session(question: str) -> str | None:
    """The session whose turns a queued extraction task carries (None: unreadable)."""
    parsed = _turns(question)
    return None if parsed is None else parsed[0]


def _turns(question: str) -> tuple[str, list[tuple[str, str]]] | None:
    try:
        data = json.loads(question)
        turns = [(str(t), x) for t, x in data["turns"]]
        session = data["session"]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(session, str) or not turns or not all(isinstance(x, str) for _, x in turns):
        return None
    return session, turns


def _model_facts(c: IdleContext, session: str, turns: list[tuple[str, str]], report: IdleReport,
                 stats: ExtractionStats, grammar: TurnGrammar) -> list[tuple[Extracted, str, str]]:
    """The valid, grounded facts the model finds in ``turns``, each with its ``source`` ids
    and the source text."""
    cfg = c.ctx.config
    calls: list[tuple[ParsedFacts, str, str, str]] = []  # (output, template, source, its text)
    if cfg.memory_extract_grammar:
        template = load_template("memory_turn_facts", cfg.prompt_dir)
        g = grammar(c.tokenizer)
        for turn_id, text in turns:
            found, gen = extract_turn(c.generate, g, template, text, max_facts=cfg.memory_facts_per_turn,
                                      max_new_tokens=cfg.memory_extract_tokens)
            calls.append((found, template, f"{session}:{turn_id}", text))
            stats.model_calls += 1
            report.prefill_tokens += gen.stats.tokens_computed
            report.decode_tokens += gen.stats.new_tokens
    else:
        template = load_template("memory_facts", cfg.prompt_dir)
        text = "\n".join(x for _, x in turns)
        gen = c.generate([Segment(_SYSTEM, "system"), Segment(f"{text}\n\n{template}", "query")],
                         max_new_tokens=cfg.memory_extract_tokens, do_sample=False)
        calls.append((parse_facts(gen.text), template, ",".join(f"{session}:{t}" for t, _ in turns), text))
        stats.model_calls += 1
        report.prefill_tokens += gen.stats.tokens_computed
        report.decode_tokens += gen.stats.new_tokens
    out: list[tuple[Extracted, str, str]] = []
    for found, template, source, text in calls:
        # A fact copied from the template (its example) is not about these turns.
        copied = [f for f in found.facts if normalize(f.text) in normalize(template)]
        stats.malformed += found.malformed + len(copied)
        kept = [f for f in found.facts if f not in copied]
        grounded = [f for f in kept if grounding(f.text, text).share >= cfg.memory_grounding]
        stats.ungrounded += len(kept) - len(grounded)
        out += [(f, source, text) for f in grounded]
    return out


def run_extraction(c: IdleContext, task: IdleTask, report: IdleReport, bank: MemoryBank,
                   stats: ExtractionStats, mode: str, grammar: TurnGrammar | None = None) -> None:
    """Run one ``memory_extract`` task (see the module docstring). ``grammar`` keeps the fact
    grammar between tasks (built anew when omitted)."""
    t0 = time.perf_counter()
    parsed = _turns(task.question)
    if parsed is None or not isinstance(task.scope, str | None):  # never run, never stored
        stats.bad_tasks += 1
        return
    session, turns = parsed
    items: list[tuple[str, str | None, dict[str, str]]] = []
    if mode in ("model", "both"):
        context = c.ctx.config.memory_context_keys
        for fact, source, text in _model_facts(c, session, turns, report, stats, grammar or TurnGrammar()):
            meta = {**fact.metadata, "source": source} | ({CONTEXT: text} if context else {})
            items.append((fact.text, task.scope, meta))
    if mode in ("raw", "both"):
        for turn_id, text in turns:
            raw = raw_turn_fact(text)
            if raw is not None:
                items.append((raw.text, task.scope, {**raw.metadata, "source": f"{session}:{turn_id}"}))
    if not c.ctx.idle_queue.queued(task):  # its session was deleted while the model ran
        return
    # a fact too long to recall would make every turn recalling it fail: dropped, counted
    limit = fact_token_limit(c.ctx.config, c.context)
    fitting = [item for item in items if fact_tokens(c.tokenizer, item[0]) <= limit]
    stats.too_long += len(items) - len(fitting)
    try:
        results = bank.add_many(fitting)
    except sqlite3.Error:  # nothing stored (one transaction): the task stays queued, runs again
        stats.write_errors += 1
        c.totals.store_errors += 1  # a failed store write, as a request's reaches pc.stats()
        raise
    if not c.ctx.idle_queue.queued(task):  # deleted while they were stored: they go with it
        _take_back(bank, results, {source for _, _, meta in fitting for source in sources(meta)})
        return
    stats.turns += len(turns)
    stats.facts_added += sum(r.status == "added" for r in results)
    stats.raw_items += sum(r.status == "added" and r.fact.metadata.get("kind") == "raw" for r in results)
    stats.duplicates += sum(r.status != "added" for r in results)
    stats.superseded += sum(len(r.superseded) for r in results)
    stats.seconds += time.perf_counter() - t0


def _take_back(bank: MemoryBank, results: Sequence[AddResult], mine: set[str]) -> None:
    """Undo what a task stored once its session was deleted: the facts it added are forgotten
    and the re-add events it recorded (they keep the session's wording) deleted; the delete
    looked for them before they were committed."""
    for r in results:
        if r.status == "added":
            bank.forget(r.fact.id)
    bank.drop_readded(lambda metadata: bool(sources(metadata)) and set(sources(metadata)) <= mine)
    bank.scrub()


def extraction_runner(bank: Callable[[IdleContext], MemoryBank], stats: ExtractionStats
                      ) -> Callable[[IdleContext, IdleTask, IdleReport], None]:
    """The runner registered for :data:`EXTRACT_KIND` (``bank(ctx)`` opens the memory)."""
    grammar = TurnGrammar()

    def run(c: IdleContext, task: IdleTask, report: IdleReport) -> None:
        run_extraction(c, task, report, bank(c), stats, c.ctx.config.memory_extraction, grammar)
    return run
