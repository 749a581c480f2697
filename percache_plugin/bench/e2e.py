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

Each user is replayed once per query stream (``--stream``, :mod:`.e2e_streams`): ``original``
(the questions as above) and ``paraphrase`` (the same, with about 30% of the queries an earlier
question coming back in hand-written other words), each on fresh stores.

Idle phases are not counted in latency; their compute is (background prefill and decode
tokens, from the :class:`~percache_plugin.idle.IdleReport` of each phase). Next to wall time, the deterministic foreground cost is reported: prompt
tokens prefilled and tokens decoded while the user waited. The methods are our own plugins
switched on and off (:mod:`percache_plugin.bench.e2e_methods`).

Outputs in ``--out``: ``results.json``, ``results.md`` and the plots of each stream (see :data:`PLOTS`).
"""
from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from ..config import Config
from ..rag.embeddings import Embedder, load_embedder
from .common import DEFAULT_QMSUM, markdown_table, require_plotting, require_qmsum
from .e2e_methods import (
    REFERENCE_METHOD,
    SMOKE_METHODS,
    SWEEP_METHOD,
    select_methods,
)
from .e2e_replay import (
    BENCH_CONFIG,
    Background,
    QueryRecord,
    ReplayContext,
    RunResult,
    replay,
    summarize,
)
from .e2e_report import PLOTS, SUMMARY_HEADER, summary_row
from .e2e_report import clean as _clean
from .e2e_results import combine, replot, summaries, write_results
from .e2e_streams import (
    PARAPHRASE_FILES,
    REPEAT_RATE,
    STREAMS,
    has_paraphrases,
    load_paraphrases,
    repeat_share,
    stream_user,
)
from .e2e_users import MemoEmbedder, Question, User, select_users
from .metrics import rouge_l

__all__ = [
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
    "STREAMS",
    "combine",
]

DEFAULT_TAUS: tuple[float, ...] = (0.6, 0.7, 0.8, 0.9, 0.95)
SMOKE_MAX_NEW_TOKENS = 16  # background answers and predictions scale with it: keeps CI < 3 min
Loader = Callable[[], tuple[Any, Any]]


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
    streams: tuple[str, ...] = STREAMS
    repeat_rate: float = REPEAT_RATE
    seed: int = 0
    paraphrase_files: tuple[Path, ...] = PARAPHRASE_FILES
    idle_budget_s: float | None = None
    knowledge_rounds: int = 2
    config: dict[str, Any] = field(default_factory=dict)
    out: Path = Path("bench-out/e2e")
    smoke: bool = False
    progress: bool = True


def _sweep(ctx: ReplayContext, settings: E2ESettings, user: User, stream: str,
           runs: Sequence[RunResult], naive: Sequence[str] | None,
           bar: Any) -> tuple[list[dict[str, Any]], list[RunResult]]:
    method = select_methods([settings.sweep_method])[0]
    default_tau = float(settings.config.get("similarity_threshold", Config().similarity_threshold))
    main = next((r for r in runs if r.user == user.id and r.method == method.name
                 and r.stream == stream and r.status == "ok"), None)
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
            result = replay(ctx, user, method, naive=naive, tau=tau, stream=stream)
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
    unknown = [s for s in settings.streams if s not in STREAMS]
    if unknown or not settings.streams:
        raise ValueError(f"streams must be some of {', '.join(STREAMS)}, got {settings.streams}")
    # the default users are those with rewordings, whichever streams run, so that runs of one
    # stream each (side by side, then --combine) replay the same users
    files = settings.paraphrase_files
    para = (load_paraphrases(files) if "paraphrase" in settings.streams
            or all(p.is_file() for p in files) else None)
    users = select_users(settings.data, settings.users, settings.queries,
                         max_meetings=settings.max_meetings, series=settings.series,
                         eligible=None if para is None else
                         (lambda u: has_paraphrases(u, para, settings.repeat_rate)))
    streams = {(u.id, s): stream_user(u, s, para, rate=settings.repeat_rate, seed=settings.seed)
               for u in users for s in settings.streams}  # raises before the model loads
    methods = select_methods(settings.methods)
    model, tok = load_model()
    memo = MemoEmbedder(load_embedder(embedder))
    common = {**BENCH_CONFIG, "background_max_new_tokens": settings.max_new_tokens}
    ctx = ReplayContext(model, tok, memo, settings.max_new_tokens, settings.idle_budget_s,
                        settings.knowledge_rounds, common, dict(settings.config), settings.progress)
    n_sweep = len(settings.tau_sweep)
    sweep_stream = "paraphrase" if "paraphrase" in settings.streams else settings.streams[0]
    runs: list[RunResult] = []
    naive_by: dict[tuple[str, str], list[str]] = {}
    with tqdm(total=len(streams) * len(methods) + n_sweep, desc="e2e", unit="run",
              disable=not settings.progress) as bar:
        for (uid, stream), user in streams.items():
            for method in methods:
                bar.set_postfix_str(f"{uid} {stream} {method.name}")
                result = replay(ctx, user, method, naive=naive_by.get((uid, stream)), stream=stream)
                runs.append(result)
                _checkpoint(settings.out, runs)
                if method.name == REFERENCE_METHOD and result.status == "ok":
                    naive_by[uid, stream] = [q.answer for q in result.queries]
                    for q in result.queries:  # the reference against itself
                        q.rouge_l_naive = rouge_l(q.answer, q.answer)
                    result.summary = summarize([result])
                bar.update(1)
        sweep: list[Any] = []
        sweep_runs: list[Any] = []
        if n_sweep:
            sweep, sweep_runs = _sweep(ctx, settings, streams[users[0].id, sweep_stream],
                                       sweep_stream, runs, naive_by.get((users[0].id, sweep_stream)),
                                       bar)
            bar.update(bar.total - bar.n)
    payload: dict[str, Any] = {
        "model": model_name,
        "embedder": memo.name,
        "settings": {**{k: v for k, v in asdict(settings).items()
                        if k not in ("data", "out", "paraphrase_files")},
                     "data": str(settings.data), "out": str(settings.out),
                     "paraphrase_files": [p.name for p in settings.paraphrase_files]},
        "methods": [{"name": m.name, "label": m.label, "config": dict(m.config),
                     "predicts": m.predicts, "idle": m.idle, "description": m.description}
                    for m in methods],
        "users": [{"id": u.id, "corpus": u.corpus, "meetings": [m.id for m in u.meetings],
                   "questions": len(u.questions),
                   "streams": {s: {"repeat_rate": repeat_share(streams[u.id, s].questions),
                                   "queries": [{"text": q.text, "repeat_of": q.repeat_of,
                                                "original": q.original}
                                               for q in streams[u.id, s].questions]}
                               for s in settings.streams}} for u in users],
        "streams": list(settings.streams),
        "sweep_stream": sweep_stream if n_sweep else None,
        "summary": summaries(methods, runs, settings.streams),
        "runs": [asdict(r) for r in runs],
        "tau_sweep": sweep,
        "tau_sweep_runs": [asdict(r) for r in sweep_runs if all(r is not x for x in runs)],
        "plots": {},
        "wall_s": time.perf_counter() - t_start,
    }
    written = write_results(settings.out, _clean(payload), runs)
    (settings.out / "results.partial.json").unlink(missing_ok=True)
    return written


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
    p.add_argument("--sweep-method", default=SWEEP_METHOD,
                   help="method of the threshold sweep (on the paraphrase stream when it runs)")
    p.add_argument("--stream", choices=(*STREAMS, "both"), default=None,
                   help="query streams: the questions as asked, with about 30%% of the queries an "
                        "earlier question reworded (hand-written), or both (default both; "
                        "--smoke: original)")
    p.add_argument("--combine", type=Path, nargs="+", default=None, metavar="DIR",
                   help="only merge the results.json of these runs (other users or streams, run "
                        "side by side) into OUT")
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


def _streams(choice: str) -> tuple[str, ...]:
    return STREAMS if choice == "both" else (choice,)


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
        streams=_streams(args.stream or ("original" if smoke else "both")),
        idle_budget_s=args.idle_budget,
        out=args.out,
        smoke=smoke,
        progress=not args.no_progress,
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    from ..bundled import load_smollm2

    require_plotting("percache bench e2e")
    if args.replot:
        payload = replot(args.out)
        print(f"redrew {len(payload['plots'])} plots and results.md in {args.out}")
        return payload
    if args.combine:
        payload = combine(args.combine, args.out)
        print(f"combined {len(args.combine)} runs into {args.out}: {len(payload['runs'])} replays, "
              f"{len(payload['plots'])} plots")
        return payload
    require_qmsum(args.data)
    torch.set_num_threads(args.threads)
    settings = settings_from_args(args)
    payload = run_benchmark(settings, load_model=lambda: load_smollm2(status=True), embedder=None,
                            model_name="SmolLM2-135M-Instruct (GGUF Q4_1, fp32)")
    for stream, summary in payload["summary"].items():
        print(f"stream {stream}:")
        print(markdown_table(SUMMARY_HEADER, [summary_row(s["label"], s) for s in summary.values()]))
    for r in payload["runs"]:
        if r["status"] != "ok":
            print(f"{r['user']} / {r['method']}: {r['status']}: {r['reason'].splitlines()[0]}")
    print(f"wrote {settings.out}/results.json, results.md and {len(payload['plots'])} plots "
          f"in {payload['wall_s'] / 60:.1f} min")
    return payload
