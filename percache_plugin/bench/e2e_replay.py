"""One user replayed with one method: documents, idle phases, questions; records and summary."""

from __future__ import annotations

import dataclasses
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from tqdm import tqdm

from ..config import ConfigError
from ..rag.qmsum import meeting_text
from .e2e_methods import (
    Method,
    MethodUnavailable,
    method_config,
)
from .e2e_users import MemoEmbedder, Question, User
from .metrics import rouge_l

__all__ = ["QueryRecord", "Background", "RunResult", "ReplayContext", "replay", "summarize", "BENCH_CONFIG"]

BENCH_CONFIG: Mapping[str, Any] = {"prediction_quiet_s": 0.0}
"""Settings of every method (where the engine has them): an idle phase stands for a quiet
period that has passed. Background answers are as long as foreground ones
(``background_max_new_tokens`` = ``--max-new-tokens``), so QA-bank answers compare fairly."""


@dataclass
class QueryRecord:
    """One question asked: what answered it, how fast, what it cost, how good it was."""

    index: int
    question: str
    meeting: str
    source: str
    latency_s: float
    ttft_s: float
    prompt_tokens: int = 0
    tokens_reused: int = 0
    tokens_shifted: int = 0
    tokens_computed: int = 0
    new_tokens: int = 0
    similarity: float | None = None
    matched_question: str | None = None
    answer: str = ""
    reference: str = ""
    rouge_l_ref: float = 0.0
    rouge_l_naive: float | None = None
    repeat_of: int | None = None  # stream index of the earlier question this one rewords
    drafting: str = ""  # "on", or why decoding ran without drafts
    tokens_drafted: int = 0
    tokens_accepted: int = 0
    decode_forwards: int = 0
    drafted_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)


@dataclass
class Background:
    """Work done outside the user's wait: idle phases and prediction calls."""

    idle_calls: int = 0
    predict_calls: int = 0
    tasks_run: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    flops: float = 0.0
    predicted: int = 0
    seconds: float = 0.0
    by_kind: dict[str, int] = field(default_factory=dict)
    prefill_by_kind: dict[str, int] = field(default_factory=dict)
    """Prompt tokens computed per task kind (the handle's background stats at the end)."""
    skipped_by_kind: dict[str, int] = field(default_factory=dict)
    """Tasks taken off the queue without running, per kind (e.g. warming at its share)."""

    def add(self, report: object, seconds: float) -> None:
        """Add an :class:`~percache_plugin.idle.IdleReport` (or anything with its counters)."""
        self.seconds += seconds
        self.tasks_run += int(getattr(report, "tasks_run", 0) or 0)
        self.prefill_tokens += int(getattr(report, "prefill_tokens", 0) or 0)
        self.decode_tokens += int(getattr(report, "decode_tokens", 0) or 0)
        self.flops += float(getattr(report, "flops", 0.0) or 0.0)
        self.predicted += len(getattr(report, "predicted", None) or ())
        for counts, into in ((getattr(report, "by_kind", None), self.by_kind),
                             (getattr(report, "skipped_by_kind", None), self.skipped_by_kind)):
            for kind, n in (counts or {}).items():
                into[str(kind)] = into.get(str(kind), 0) + int(n)


@dataclass
class RunResult:
    """One user replayed with one method (``status`` ``skipped``/``failed`` carry a reason)."""

    user: str
    method: str
    label: str
    status: Literal["ok", "skipped", "failed"]
    reason: str = ""
    tau: float | None = None
    stream: str = "original"
    queries: list[QueryRecord] = field(default_factory=list)
    background: Background = field(default_factory=Background)
    kv_bytes: int = 0
    qa_bytes: int = 0
    qa_entries: int = 0
    qa_predicted_entries: int = 0
    documents_s: float = 0.0
    wall_s: float = 0.0
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ReplayContext:
    model: Any
    tokenizer: Any
    embedder: MemoEmbedder
    max_new_tokens: int
    idle_budget_s: float | None = None
    knowledge_rounds: int = 2
    common: Mapping[str, Any] = field(default_factory=dict)
    config: Mapping[str, Any] = field(default_factory=dict)
    progress: bool = True


def _record(i: int, q: Question, ans: Any, naive: Sequence[str] | None) -> QueryRecord:
    st = ans.stats
    rec = QueryRecord(
        i, q.text, q.meeting, ans.source, ans.latency_s,
        st.ttft_s if st is not None else ans.latency_s,
        similarity=ans.similarity, matched_question=ans.matched_question, answer=ans.text,
        reference=q.answer, rouge_l_ref=rouge_l(ans.text, q.answer),
        rouge_l_naive=rouge_l(ans.text, naive[i]) if naive is not None and i < len(naive) else None,
        repeat_of=q.repeat_of,
    )
    if st is not None:
        rec.prompt_tokens, rec.tokens_reused = st.prompt_tokens, st.tokens_reused
        rec.tokens_shifted, rec.tokens_computed = st.tokens_shifted, st.tokens_computed
        rec.new_tokens = st.new_tokens
        rec.drafting, rec.tokens_drafted = st.drafting, st.tokens_drafted
        rec.tokens_accepted, rec.decode_forwards = st.tokens_accepted, st.decode_forwards
        rec.drafted_by_source = dict(st.drafted_by_source)
        rec.accepted_by_source = dict(st.accepted_by_source)
    return rec


def _idle(pc: Any, ctx: ReplayContext, bg: Background) -> None:
    t0 = time.perf_counter()
    report = pc.idle(budget_s=ctx.idle_budget_s)
    bg.idle_calls += 1
    bg.add(report, time.perf_counter() - t0)


def _predict(pc: Any, bg: Background, kind: str, scope: str, *, done: int | None = None,
             **kwargs: Any) -> bool:
    """Ask for a ``kind`` prediction unless the engine's own triggers already queued one or
    ran ``done`` of them (new documents and questions trigger predictions by themselves; a
    manual call on top would predict twice). Returns whether it called ``pc.predict``."""
    task = f"predict_{kind}"
    if done is not None and bg.by_kind.get(task, 0) >= done:
        return False
    if any(t.kind == task for t in pc.idle_queue.pending()):
        return False
    t0 = time.perf_counter()
    report = pc.predict(kind, scope=scope, **kwargs)
    bg.predict_calls += 1
    bg.add(report, time.perf_counter() - t0)
    return True


def _drive(pc: Any, ctx: ReplayContext, user: User, method: Method, result: RunResult,
           naive: Sequence[str] | None) -> None:
    bg = result.background
    for m in user.meetings:
        t0 = time.perf_counter()
        with ctx.embedder.caching():
            pc.add_documents({"text": meeting_text(m), "id": m.id, "metadata": {"meeting": m.id}},
                             scope=user.id)
        result.documents_s += time.perf_counter() - t0
        if method.idle:
            _idle(pc, ctx, bg)
    if method.predicts and _predict(pc, bg, "knowledge", user.id, done=ctx.knowledge_rounds,
                                    rounds=ctx.knowledge_rounds):
        _idle(pc, ctx, bg)
    bar = tqdm(user.questions, desc=f"  {user.id} {method.name}", leave=False,
               disable=not ctx.progress, unit="q")
    for i, q in enumerate(bar):
        ans = pc.ask(q.text, scope=user.id, max_new_tokens=ctx.max_new_tokens)
        result.queries.append(_record(i, q, ans, naive))
        if method.predicts:
            _predict(pc, bg, "history", user.id)
        if method.idle:
            _idle(pc, ctx, bg)
    costs = getattr(pc, "background_stats", None)
    bg.prefill_by_kind = {str(k): int(c.prefill_tokens) for k, c in getattr(costs, "by_kind", {}).items()}
    result.kv_bytes = int(pc.store.total_bytes())
    result.qa_bytes = int(pc.qa_bank.total_bytes())
    entries = pc.qa_bank.entries()
    result.qa_entries = len(entries)
    result.qa_predicted_entries = sum(e.origin == "predicted" for e in entries)


def replay(ctx: ReplayContext, user: User, method: Method, *, naive: Sequence[str] | None = None,
           tau: float | None = None, stream: str = "original") -> RunResult:
    """Replay ``user`` with ``method`` on a fresh temporary store. A method this engine cannot
    run (a Config key or ``PerCache.predict`` missing) is skipped at set-up; an error during
    the replay is recorded as ``failed`` with its traceback, so one run cannot sink the rest."""
    from ..handle import enable

    t0 = time.perf_counter()
    result = RunResult(user.id, method.name, method.label, "ok", tau=tau, stream=stream)
    overrides = dict(ctx.config)
    if tau is not None:
        overrides["similarity_threshold"] = tau
    try:
        cfg = method_config(method, overrides, common=ctx.common)
    except MethodUnavailable as exc:
        return dataclasses.replace(result, status="skipped", reason=str(exc))
    with tempfile.TemporaryDirectory(prefix="percache-e2e-") as tmp:
        try:
            pc = enable(ctx.model, ctx.tokenizer, store=tmp, embedder=ctx.embedder, **cfg)
        except ConfigError as exc:
            return dataclasses.replace(result, status="skipped", reason=f"Config: {exc}")
        try:
            if method.predicts and not callable(getattr(pc, "predict", None)):
                result.status, result.reason = "skipped", "this engine has no PerCache.predict()"
            else:
                _drive(pc, ctx, user, method, result, naive)
        except Exception as exc:  # noqa: BLE001 - recorded, the benchmark goes on
            result.status = "failed"
            result.reason = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
        finally:
            pc.disable()
    result.wall_s = time.perf_counter() - t0
    if result.status == "ok":
        result.summary = summarize([result])
    return result


# -- summaries ------------------------------------------------------------------------------
def _stat(xs: Sequence[float], q: float | None = None) -> float | None:
    if not xs:
        return None
    return float(np.mean(xs)) if q is None else float(np.percentile(xs, q))


def summarize(runs: Sequence[RunResult]) -> dict[str, Any]:
    """Pooled figures over the questions of ``runs`` (one user, or all users of a method)."""
    recs = [r for run in runs for r in run.queries]
    gen = [r for r in recs if r.source != "qa_bank"]
    lat = [r.latency_s for r in recs]
    ttft = [r.ttft_s for r in recs]
    prompt = sum(r.prompt_tokens for r in gen)
    naive = [r.rouge_l_naive for r in recs if r.rouge_l_naive is not None]
    bg = [run.background for run in runs]
    fg_prefill = sum(r.tokens_computed for r in gen)
    fg_decode = sum(r.new_tokens for r in gen)
    repeats = [r for r in recs if r.repeat_of is not None]
    drafted = sum(r.tokens_drafted for r in gen)
    by_source: dict[str, list[int]] = {}
    for r in gen:
        for src, n in r.drafted_by_source.items():
            acc = by_source.setdefault(src, [0, 0])
            acc[0] += n
            acc[1] += r.accepted_by_source.get(src, 0)
    return {
        "users": len(runs),
        "queries": len(recs),
        "latency_mean_s": _stat(lat),
        "latency_p50_s": _stat(lat, 50),
        "latency_p95_s": _stat(lat, 95),
        "ttft_mean_s": _stat(ttft),
        "ttft_p50_s": _stat(ttft, 50),
        "ttft_p95_s": _stat(ttft, 95),
        "qa_hit_rate": (len(recs) - len(gen)) / len(recs) if recs else None,
        "repeat_rate": len(repeats) / len(recs) if recs else None,
        "qa_hit_rate_repeats": (sum(r.source == "qa_bank" for r in repeats) / len(repeats)
                                if repeats else None),
        "kv_hit_ratio": sum(r.tokens_reused + r.tokens_shifted for r in gen) / prompt if prompt else 0.0,
        "kv_exact_ratio": sum(r.tokens_reused for r in gen) / prompt if prompt else 0.0,
        "kv_shifted_ratio": sum(r.tokens_shifted for r in gen) / prompt if prompt else 0.0,
        "rouge_l_ref": _stat([r.rouge_l_ref for r in recs]),
        "rouge_l_naive": _stat(naive),
        "fg_prefill_tokens": fg_prefill,
        "fg_decode_tokens": fg_decode,
        "fg_tokens": fg_prefill + fg_decode,
        "fg_tokens_per_query": (fg_prefill + fg_decode) / len(recs) if recs else None,
        "drafted_answers": sum(r.drafting == "on" for r in gen),
        "tokens_drafted": drafted,
        "tokens_accepted": sum(r.tokens_accepted for r in gen),
        "draft_acceptance": sum(r.tokens_accepted for r in gen) / drafted if drafted else None,
        "decode_forwards": sum(r.decode_forwards for r in gen),
        "drafted_by_source": {k: v[0] for k, v in sorted(by_source.items())},
        "accepted_by_source": {k: v[1] for k, v in sorted(by_source.items())},
        "bg_prefill_tokens": sum(b.prefill_tokens for b in bg),
        "bg_prefill_by_kind": {k: sum(b.prefill_by_kind.get(k, 0) for b in bg)
                               for k in sorted({k for b in bg for k in b.prefill_by_kind})},
        "bg_skipped_by_kind": {k: sum(b.skipped_by_kind.get(k, 0) for b in bg)
                               for k in sorted({k for b in bg for k in b.skipped_by_kind})},
        "bg_decode_tokens": sum(b.decode_tokens for b in bg),
        "bg_tasks": sum(b.tasks_run for b in bg),
        "bg_seconds": sum(b.seconds for b in bg),
        "kv_bytes": sum(run.kv_bytes for run in runs),
        "qa_bytes": sum(run.qa_bytes for run in runs),
        "stored_bytes": sum(run.kv_bytes + run.qa_bytes for run in runs),
        "qa_entries": sum(run.qa_entries for run in runs),
        "qa_predicted_entries": sum(run.qa_predicted_entries for run in runs),
        "wall_s": sum(run.wall_s for run in runs),
    }


# -- settings and the whole benchmark ---------------------------------------------------------
