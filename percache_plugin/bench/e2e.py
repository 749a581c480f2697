"""``percache bench e2e``: replay QMSum users end to end and compare caching methods.

A user is a QMSum meeting series (its first ``--max-meetings`` meetings; a one-meeting series
is a user too). For every user and method, on a fresh store:

1. each meeting, in order, is added as one document (``pc.add_documents``, scope = the series),
   followed by an idle phase (``pc.idle()``);
2. methods that predict get two knowledge-based prediction rounds before the first question
   and a history-based one after each answer. The engine queues these itself (new documents
   and questions trigger them); the harness calls ``pc.predict`` only where it did not, so
   nothing is predicted twice;
3. the series' specific questions are asked in order (``pc.ask``, timed); after each answer
   every method with background work runs an idle phase.

Idle phases are not counted in latency; their compute is (background prefill and decode
tokens, from the :class:`~percache_plugin.idle.IdleReport` of each phase). Next to wall time, the deterministic foreground cost is reported: prompt
tokens prefilled and tokens decoded while the user waited. The methods are our own plugins
switched on and off (:mod:`percache_plugin.bench.e2e_methods`).

Outputs in ``--out``: ``results.json``, ``results.md`` and four plots (see :data:`PLOTS`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import re
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from tqdm import tqdm

from ..config import Config, ConfigError
from ..rag.embeddings import Embedder, load_embedder
from ..rag.qmsum import Meeting, iter_series, meeting_text
from .common import DEFAULT_QMSUM, markdown_table, require_qmsum
from .e2e_methods import (
    PREDICTION_PAIRS,
    REFERENCE_METHOD,
    SMOKE_METHODS,
    SWEEP_METHOD,
    Method,
    MethodUnavailable,
    method_config,
    select_methods,
)
from .metrics import rouge_l

__all__ = [
    "require_plotting",
    "add_arguments",
    "run",
    "run_benchmark",
    "E2ESettings",
    "User",
    "Question",
    "QueryRecord",
    "Background",
    "RunResult",
    "MemoEmbedder",
    "select_users",
    "replay",
    "replot",
    "summarize",
    "PLOTS",
    "BENCH_CONFIG",
    "DEFAULT_TAUS",
]

DEFAULT_TAUS: tuple[float, ...] = (0.6, 0.7, 0.8, 0.9, 0.95)
SMOKE_MAX_NEW_TOKENS = 16  # background answers and predictions scale with it: keeps CI < 3 min
PLOTS: Mapping[str, str] = {
    "per_query_latency": "fig11_latency_per_query.png",
    "mean_latency": "fig14_mean_latency.png",
    "hit_rates": "fig16b_hit_rates.png",
    "tau_sweep": "fig19_tau_sweep.png",
}
_CORPORA = ("AMI", "ICSI", "committee")
BENCH_CONFIG: Mapping[str, Any] = {"prediction_quiet_s": 0.0}
"""Settings of every method (where the engine has them): an idle phase stands for a quiet
period that has passed. Background answers are as long as foreground ones
(``background_max_new_tokens`` = ``--max-new-tokens``), so QA-bank answers compare fairly."""
Loader = Callable[[], tuple[Any, Any]]


# -- users ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Question:
    text: str
    answer: str
    meeting: str


@dataclass(frozen=True)
class User:
    """One replayed user: a meeting series' meetings (documents) and questions, in order."""

    id: str
    corpus: str
    meetings: tuple[Meeting, ...]
    questions: tuple[Question, ...]


def corpus_of(series: str) -> str:
    """``AMI`` (``ES2002``), ``ICSI`` (``Bed``) or ``committee`` (``covid``)."""
    if re.fullmatch(r"[A-Z]{2}\d{4}", series):
        return "AMI"
    if re.fullmatch(r"B[a-z]{2}", series):
        return "ICSI"
    return "committee"


def _user(series: str, meetings: Sequence[Meeting], n_queries: int) -> User:
    qs = [Question(q.text, q.answer, m.id) for m in meetings for q in m.queries
          if q.kind == "specific"]
    return User(series, corpus_of(series), tuple(meetings), tuple(qs[:n_queries]))


def select_users(root: Path, n_users: int, n_queries: int, *, max_meetings: int,
                 series: Sequence[str] | None = None) -> list[User]:
    """Users with at least ``n_queries`` specific questions in their first ``max_meetings``
    meetings; the default choice alternates AMI, ICSI and committee series (each in id order),
    ``series`` names them instead. Raises ValueError when none qualifies or a name is unknown."""
    if n_users < 1 or n_queries < 1 or max_meetings < 1:
        raise ValueError("--users, --queries and --max-meetings must be at least 1")
    all_series = {s: ms[:max_meetings] for s, ms in iter_series(root)}
    if series:
        unknown = [s for s in series if s not in all_series]
        if unknown:
            raise ValueError(f"unknown series {unknown}; known: {sorted(all_series)}")
        return [_user(s, all_series[s], n_queries) for s in series[:n_users]]
    by_corpus: dict[str, list[User]] = {c: [] for c in _CORPORA}
    for s, ms in all_series.items():
        user = _user(s, ms, n_queries)
        if len(user.questions) >= n_queries:
            by_corpus[user.corpus].append(user)
    users: list[User] = []
    while len(users) < n_users and any(by_corpus.values()):
        for corpus in _CORPORA:
            if by_corpus[corpus] and len(users) < n_users:
                users.append(by_corpus[corpus].pop(0))
    if not users:
        raise ValueError(f"no QMSum series under {root} has {n_queries} specific questions in its "
                         f"first {max_meetings} meetings (lower --queries or raise --max-meetings)")
    return users


# -- embedder -------------------------------------------------------------------------------
class MemoEmbedder:
    """Wraps an embedder; inside :meth:`caching` it remembers vectors by text.

    Every method of a user adds the same documents: their chunks are embedded once, not once
    per method (document arrival is untimed anyway). Questions are always embedded afresh, so
    no method's timed lookups profit from another's work."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self._memo: dict[str, np.ndarray] = {}
        self._caching = False

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dim(self) -> int:
        return self._inner.dim

    @contextlib.contextmanager
    def caching(self) -> Iterator[None]:
        self._caching = True
        try:
            yield
        finally:
            self._caching = False

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not self._caching:
            return self._inner.embed(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self._memo))
        if missing:
            for text, vec in zip(missing, self._inner.embed(missing), strict=True):
                self._memo[text] = vec
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._memo[t] for t in texts]).astype(np.float32)


# -- one replay -----------------------------------------------------------------------------
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

    def add(self, report: object, seconds: float) -> None:
        """Add an :class:`~percache_plugin.idle.IdleReport` (or anything with its counters)."""
        self.seconds += seconds
        self.tasks_run += int(getattr(report, "tasks_run", 0) or 0)
        self.prefill_tokens += int(getattr(report, "prefill_tokens", 0) or 0)
        self.decode_tokens += int(getattr(report, "decode_tokens", 0) or 0)
        self.flops += float(getattr(report, "flops", 0.0) or 0.0)
        self.predicted += len(getattr(report, "predicted", None) or ())
        for kind, n in (getattr(report, "by_kind", None) or {}).items():
            self.by_kind[str(kind)] = self.by_kind.get(str(kind), 0) + int(n)


@dataclass
class RunResult:
    """One user replayed with one method (``status`` ``skipped``/``failed`` carry a reason)."""

    user: str
    method: str
    label: str
    status: Literal["ok", "skipped", "failed"]
    reason: str = ""
    tau: float | None = None
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
    )
    if st is not None:
        rec.prompt_tokens, rec.tokens_reused = st.prompt_tokens, st.tokens_reused
        rec.tokens_shifted, rec.tokens_computed = st.tokens_shifted, st.tokens_computed
        rec.new_tokens = st.new_tokens
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
    result.kv_bytes = int(pc.store.total_bytes())
    result.qa_bytes = int(pc.qa_bank.total_bytes())
    entries = pc.qa_bank.entries()
    result.qa_entries = len(entries)
    result.qa_predicted_entries = sum(e.origin == "predicted" for e in entries)


def replay(ctx: ReplayContext, user: User, method: Method, *, naive: Sequence[str] | None = None,
           tau: float | None = None) -> RunResult:
    """Replay ``user`` with ``method`` on a fresh temporary store. A method this engine cannot
    run (a Config key or ``PerCache.predict`` missing) is skipped at set-up; an error during
    the replay is recorded as ``failed`` with its traceback, so one run cannot sink the rest."""
    from ..handle import enable

    t0 = time.perf_counter()
    result = RunResult(user.id, method.name, method.label, "ok", tau=tau)
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
        "kv_hit_ratio": sum(r.tokens_reused + r.tokens_shifted for r in gen) / prompt if prompt else 0.0,
        "kv_exact_ratio": sum(r.tokens_reused for r in gen) / prompt if prompt else 0.0,
        "kv_shifted_ratio": sum(r.tokens_shifted for r in gen) / prompt if prompt else 0.0,
        "rouge_l_ref": _stat([r.rouge_l_ref for r in recs]),
        "rouge_l_naive": _stat(naive),
        "fg_prefill_tokens": fg_prefill,
        "fg_decode_tokens": fg_decode,
        "fg_tokens": fg_prefill + fg_decode,
        "fg_tokens_per_query": (fg_prefill + fg_decode) / len(recs) if recs else None,
        "bg_prefill_tokens": sum(b.prefill_tokens for b in bg),
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
@dataclass
class E2ESettings:
    """Everything a run depends on (the CLI flags, resolved)."""

    data: Path = DEFAULT_QMSUM
    users: int = 6
    queries: int = 4
    methods: tuple[str, ...] | None = None
    max_new_tokens: int = 32
    max_meetings: int = 1
    series: tuple[str, ...] | None = None
    tau_sweep: tuple[float, ...] = DEFAULT_TAUS
    sweep_method: str = SWEEP_METHOD
    idle_budget_s: float | None = None
    knowledge_rounds: int = 2
    config: dict[str, Any] = field(default_factory=dict)
    out: Path = Path("bench-out/e2e")
    smoke: bool = False
    progress: bool = True


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _fmt(x: Any, spec: str = ".2f") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, spec)


_HEADER = ["method", "users", "queries", "latency mean s", "p50", "p95", "TTFT mean s", "p50",
           "p95", "QA hit", "K/V hit", "ROUGE-L ref", "ROUGE-L vs naive", "fg prefill tok",
           "fg decode tok", "bg prefill tok", "bg decode tok", "stored"]


def _row(name: str, s: Mapping[str, Any]) -> list[str]:
    return [name, str(s["users"]), str(s["queries"]), _fmt(s["latency_mean_s"]),
            _fmt(s["latency_p50_s"]), _fmt(s["latency_p95_s"]), _fmt(s["ttft_mean_s"]),
            _fmt(s["ttft_p50_s"]), _fmt(s["ttft_p95_s"]), _fmt(s["qa_hit_rate"], ".0%"),
            _fmt(s["kv_hit_ratio"], ".0%"), _fmt(s["rouge_l_ref"], ".3f"),
            _fmt(s["rouge_l_naive"], ".3f"), str(s["fg_prefill_tokens"]),
            str(s["fg_decode_tokens"]), str(s["bg_prefill_tokens"]), str(s["bg_decode_tokens"]),
            _bytes(s["stored_bytes"])]


def _user_row(run: Mapping[str, Any]) -> list[str]:
    row = _row(run["label"], run["summary"])
    return [run["user"], row[0], *row[2:]]  # the users column is always 1 here


def _markdown(payload: Mapping[str, Any]) -> str:
    st = payload["settings"]
    lines = [
        "# percache bench e2e", "",
        f"Model: {payload['model']}; embedder: {payload['embedder']}; users: "
        f"{', '.join(u['id'] for u in payload['users'])}; {st['queries']} questions per user; "
        f"max_new_tokens={st['max_new_tokens']}; wall time {payload['wall_s'] / 60:.1f} min.", "",
        "Latency and TTFT in seconds (wall clock, noisy); fg = tokens computed while the user "
        "waited (deterministic cost proxy), bg = idle-time tokens; K/V hit = reused tokens / "
        "prompt tokens of generated answers.", "",
        "## All users", "",
        markdown_table(_HEADER, [_row(s["label"], s) for s in payload["summary"].values()]), "",
        "## Per user", "",
        markdown_table(["user", _HEADER[0], *_HEADER[2:]],
                       [_user_row(r) for r in payload["runs"] if r["status"] == "ok"]),
    ]
    if payload["tau_sweep"]:
        lines += ["", f"## Threshold sweep ({st['sweep_method']}, user {payload['users'][0]['id']})",
                  "", markdown_table(
                      ["tau", "latency mean s", "QA hit", "ROUGE-L ref", "ROUGE-L vs naive", "note"],
                      [[_fmt(p["tau"]), _fmt(p["latency_mean_s"]), _fmt(p["qa_hit_rate"], ".0%"),
                        _fmt(p["rouge_l_ref"], ".3f"), _fmt(p["rouge_l_naive"], ".3f"),
                        p.get("note", "")] for p in payload["tau_sweep"]])]
    other = [r for r in payload["runs"] + payload["tau_sweep_runs"] if r["status"] != "ok"]
    if other:
        lines += ["", "## Not run", ""]
        lines += [f"- {r['user']} / {r['method']}: {r['status']}: "
                  f"{r['reason'].splitlines()[0] if r['reason'] else ''}" for r in other]
    if payload["plots"]:
        lines += ["", "## Plots", ""] + [f"![{k}]({v})" for k, v in payload["plots"].items()]
    return "\n".join(lines) + "\n"


def _clean(x: Any) -> Any:
    """JSON-safe: NaN and inf become None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def _plots(out: Path, users: Sequence[str], methods: Sequence[Method], runs: Sequence[RunResult],
           summary: Mapping[str, Mapping[str, Any]], sweep: Sequence[Mapping[str, Any]],
           sweep_method: str) -> dict[str, str]:
    from . import plots  # matplotlib (the "bench" extra) only when plotting

    ok = {(r.user, r.method): r for r in runs if r.status == "ok"}
    label = {m.name: m.label for m in methods}
    written: dict[str, str] = {}
    first = users[0]
    series = {label[m.name]: [(q.latency_s, q.ttft_s, q.source == "qa_bank")
                              for q in ok[first, m.name].queries]
              for m in methods if (first, m.name) in ok}
    if series:
        written["per_query_latency"] = plots.per_query_latency(
            series, first, out / PLOTS["per_query_latency"]).name
    table = {u: {label[m.name]: ok[u, m.name].summary for m in methods if (u, m.name) in ok}
             for u in users}
    table["all"] = {label[m]: s for m, s in summary.items()}
    if table["all"]:
        written["mean_latency"] = plots.mean_latency(table, out / PLOTS["mean_latency"]).name
    pairs: list[tuple[str, Any, Any]] = [
        (name, summary.get(a), summary.get(b)) for name, a, b in PREDICTION_PAIRS
        if a in summary or b in summary]
    if not pairs:  # no pair member ran: each method on its own, on its side
        pairs = [(label[m.name], None if m.predicts else summary[m.name],
                  summary[m.name] if m.predicts else None) for m in methods if m.name in summary]
    if pairs:
        written["hit_rates"] = plots.hit_rates(pairs, out / PLOTS["hit_rates"]).name
    if sweep:
        cutoff = getattr(Config(), "population_cutoff", None)
        default_tau = next((float(p["tau"]) for p in sweep
                            if str(p.get("note", "")).startswith("main run")),
                           Config().similarity_threshold)
        written["tau_sweep"] = plots.tau_sweep(sweep, out / PLOTS["tau_sweep"],
                                               method=sweep_method, user=first,
                                               cutoff=cutoff, default_tau=default_tau).name
    return written


def _sweep(ctx: ReplayContext, settings: E2ESettings, user: User, runs: Sequence[RunResult],
           naive: Sequence[str] | None, bar: Any) -> tuple[list[dict[str, Any]], list[RunResult]]:
    method = select_methods([settings.sweep_method])[0]
    default_tau = float(settings.config.get("similarity_threshold", Config().similarity_threshold))
    main = next((r for r in runs if r.user == user.id and r.method == method.name
                 and r.status == "ok"), None)
    points, sweep_runs = [], []
    taus = set(settings.tau_sweep)
    if main is not None:  # the main run is the point at the default tau, free of charge
        taus.add(default_tau)
    for tau in sorted(taus):
        note = ""
        if main is not None and math.isclose(tau, default_tau):
            result, note = main, "main run (default tau)"
        else:
            bar.set_postfix_str(f"{user.id} {method.name} tau={tau}")
            result = replay(ctx, user, method, naive=naive, tau=tau)
            bar.update(1)
        sweep_runs.append(result)
        if result.status == "ok":
            points.append({"tau": tau, **result.summary, "note": note})
    return points, sweep_runs


def _checkpoint(out: Path, runs: Sequence[RunResult]) -> None:
    """Runs so far, in case the benchmark is stopped (results.partial.json)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.partial.json").write_text(json.dumps(_clean([asdict(r) for r in runs])))


def run_benchmark(settings: E2ESettings, *, load_model: Loader,
                  embedder: str | Embedder | None = None,
                  model_name: str = "model") -> dict[str, Any]:
    """Run the whole benchmark and write its outputs to ``settings.out``; returns the payload
    of ``results.json``. ``load_model`` returns ``(model, tokenizer)``."""
    t_start = time.perf_counter()
    users = select_users(settings.data, settings.users, settings.queries,
                         max_meetings=settings.max_meetings, series=settings.series)
    methods = select_methods(settings.methods)
    model, tok = load_model()
    memo = MemoEmbedder(load_embedder(embedder))
    common = {**BENCH_CONFIG, "background_max_new_tokens": settings.max_new_tokens}
    ctx = ReplayContext(model, tok, memo, settings.max_new_tokens, settings.idle_budget_s,
                        settings.knowledge_rounds, common, dict(settings.config), settings.progress)
    n_sweep = len(settings.tau_sweep)
    runs: list[RunResult] = []
    naive_by_user: dict[str, list[str]] = {}
    with tqdm(total=len(users) * len(methods) + n_sweep, desc="e2e", unit="run",
              disable=not settings.progress) as bar:
        for user in users:
            for method in methods:
                bar.set_postfix_str(f"{user.id} {method.name}")
                result = replay(ctx, user, method, naive=naive_by_user.get(user.id))
                runs.append(result)
                _checkpoint(settings.out, runs)
                if method.name == REFERENCE_METHOD and result.status == "ok":
                    naive_by_user[user.id] = [q.answer for q in result.queries]
                    for q in result.queries:  # the reference against itself
                        q.rouge_l_naive = rouge_l(q.answer, q.answer)
                    result.summary = summarize([result])
                bar.update(1)
        sweep, sweep_runs = ([], [])
        if n_sweep:
            sweep, sweep_runs = _sweep(ctx, settings, users[0], runs,
                                       naive_by_user.get(users[0].id), bar)
            bar.update(bar.total - bar.n)
    summary = {}
    for m in methods:
        done = [r for r in runs if r.method == m.name and r.status == "ok"]
        if done:
            summary[m.name] = {"label": m.label, **summarize(done)}
    payload: dict[str, Any] = {
        "model": model_name,
        "embedder": memo.name,
        "settings": {**{k: v for k, v in asdict(settings).items() if k not in ("data", "out")},
                     "data": str(settings.data), "out": str(settings.out)},
        "methods": [{"name": m.name, "label": m.label, "config": dict(m.config),
                     "predicts": m.predicts, "idle": m.idle, "description": m.description}
                    for m in methods],
        "users": [{"id": u.id, "corpus": u.corpus, "meetings": [m.id for m in u.meetings],
                   "questions": len(u.questions)} for u in users],
        "summary": summary,
        "runs": [asdict(r) for r in runs],
        "tau_sweep": sweep,
        "tau_sweep_runs": [asdict(r) for r in sweep_runs if all(r is not x for x in runs)],
        "plots": {},
        "wall_s": time.perf_counter() - t_start,
    }
    written = _write(settings.out, _clean(payload), runs)
    (settings.out / "results.partial.json").unlink(missing_ok=True)
    return written


def _write(out: Path, payload: dict[str, Any], runs: Sequence[RunResult]) -> dict[str, Any]:
    """results.json (first, so a plotting error loses no data), the plots, results.md."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(payload, indent=2))
    methods = select_methods([m["name"] for m in payload["methods"]])
    payload["plots"] = _plots(out, [u["id"] for u in payload["users"]], methods, runs,
                              payload["summary"], payload["tau_sweep"],
                              payload["settings"]["sweep_method"])
    (out / "results.json").write_text(json.dumps(payload, indent=2))
    (out / "results.md").write_text(_markdown(payload))
    return payload


def _run_from_dict(d: Mapping[str, Any]) -> RunResult:
    fields = {**d, "queries": [QueryRecord(**q) for q in d["queries"]],
              "background": Background(**d["background"])}
    return RunResult(**fields)


def replot(out: Path) -> dict[str, Any]:
    """Redraw the plots and results.md from ``out/results.json`` (no model needed)."""
    path = out / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"no results.json in {out} (run the benchmark first)")
    payload = json.loads(path.read_text())
    return _write(out, payload, [_run_from_dict(r) for r in payload["runs"]])


# -- CLI ------------------------------------------------------------------------------------
def _taus(text: str) -> tuple[float, ...]:
    try:
        taus = tuple(float(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--tau-sweep wants comma-separated numbers, got {text!r}") from None
    if any(not 0.0 < t <= 1.0 for t in taus):
        raise argparse.ArgumentTypeError(f"every tau must be in (0, 1], got {text!r}")
    return taus


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = E2ESettings()
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM, help="QMSum folder")
    p.add_argument("--users", type=int, default=None, help=f"users (series) replayed (default {d.users})")
    p.add_argument("--queries", type=int, default=None,
                   help=f"questions per user, in order (default {d.queries})")
    p.add_argument("--methods", nargs="+", default=None, help="method names (default: all)")
    p.add_argument("--max-new-tokens", type=int, default=None,
                   help=f"answer length cap (default {d.max_new_tokens})")
    p.add_argument("--max-meetings", type=int, default=None,
                   help=f"meetings per series used as documents (default {d.max_meetings})")
    p.add_argument("--series", nargs="+", default=None, help="replay these series (default: chosen)")
    p.add_argument("--tau-sweep", type=_taus, default=None,
                   help="similarity thresholds for the sweep on the first user, e.g. 0.6,0.8 "
                        "('' for none; default 0.6,0.7,0.8,0.9,0.95)")
    p.add_argument("--sweep-method", default=SWEEP_METHOD, help="method of the threshold sweep")
    p.add_argument("--idle-budget", type=float, default=None,
                   help="seconds per idle phase (default: until the idle queue is empty)")
    p.add_argument("--out", type=Path, default=Path("bench-out/e2e"), help="output folder")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1: on a shared 2-core machine two threads are slower)")
    p.add_argument("--smoke", action="store_true",
                   help=f"1 user (one meeting), 3 questions, methods {' and '.join(SMOKE_METHODS)}, "
                        f"max_new_tokens={SMOKE_MAX_NEW_TOKENS}, no sweep (CI, under 3 minutes)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--replot", action="store_true",
                   help="only redraw the plots and results.md from OUT/results.json")


def settings_from_args(args: argparse.Namespace) -> E2ESettings:
    """Resolve the flags; ``--smoke`` changes the defaults, explicit flags still win."""
    d = E2ESettings()
    smoke = bool(args.smoke)

    def pick(value: Any, normal: Any, small: Any) -> Any:
        return value if value is not None else (small if smoke else normal)

    return E2ESettings(
        data=args.data,
        users=pick(args.users, d.users, 1),
        queries=pick(args.queries, d.queries, 3),
        methods=tuple(args.methods) if args.methods else (SMOKE_METHODS if smoke else None),
        max_new_tokens=pick(args.max_new_tokens, d.max_new_tokens, SMOKE_MAX_NEW_TOKENS),
        max_meetings=pick(args.max_meetings, d.max_meetings, 1),
        series=tuple(args.series) if args.series else None,
        tau_sweep=pick(args.tau_sweep, d.tau_sweep, ()),
        sweep_method=args.sweep_method,
        idle_budget_s=args.idle_budget,
        out=args.out,
        smoke=smoke,
        progress=not args.no_progress,
    )


def require_plotting() -> None:
    """Fail at once, before any benchmark work, when matplotlib (the plots) is missing.

    :raises UsageError: naming the install command.
    """
    import importlib.util

    from ..cli_errors import UsageError

    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError("percache bench e2e draws its plots with matplotlib, which is not "
                         "installed", "pip install 'percache-plugin[bench]'")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from ..bundled import load_smollm2

    require_plotting()
    if args.replot:
        payload = replot(args.out)
        print(f"redrew {len(payload['plots'])} plots and results.md in {args.out}")
        return payload
    require_qmsum(args.data)
    torch.set_num_threads(args.threads)
    settings = settings_from_args(args)
    payload = run_benchmark(settings, load_model=load_smollm2, embedder=None,
                            model_name="SmolLM2-135M-Instruct (GGUF Q4_1, fp32)")
    print(markdown_table(_HEADER, [_row(s["label"], s) for s in payload["summary"].values()]))
    for r in payload["runs"]:
        if r["status"] != "ok":
            print(f"{r['user']} / {r['method']}: {r['status']}: {r['reason'].splitlines()[0]}")
    print(f"wrote {settings.out}/results.json, results.md and {len(payload['plots'])} plots "
          f"in {payload['wall_s'] / 60:.1f} min")
    return payload
