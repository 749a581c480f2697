"""The capability matrix: the suite on a tiny model of every registered causal-LM family.

Each family runs in its own subprocess (``python -m percache_plugin.conformance.matrix --one
TYPE``) under a time bound; its row says exact and shifted reuse as the suite found them, or
why the family was skipped. :func:`format_matrix` renders the rows as the Markdown table in
``docs/capability-matrix.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = ["FamilyRow", "RowStatus", "format_matrix", "run_family", "run_matrix", "main"]

RowStatus = Literal["pass", "fail", "skip", "timeout"]


@dataclass(frozen=True)
class FamilyRow:
    """One family's line of the matrix.

    :ivar family: the ``model_type``.
    :ivar status: ``pass`` (every applicable check passed), ``fail``, ``skip`` (no tiny model
        could be built: ``reason`` says why) or ``timeout``.
    :ivar exact: the exact-reuse capability (``supported`` / ``not applicable`` / ``failed``).
    :ivar shifted: the shifted-reuse capability.
    :ivar reason: why skipped, failed or not applicable.
    :ivar seconds: wall time of the family's subprocess.
    """

    family: str
    status: RowStatus
    exact: str = "-"
    shifted: str = "-"
    reason: str = ""
    seconds: float = 0.0


def _one(model_type: str) -> FamilyRow:
    """Build and run the suite in this process (the subprocess side)."""
    import torch

    from .families import Unbuildable, build_family
    from .subject import SuiteOptions
    from .suite import run_suite
    from .tiny import TINY_MIN_AGREEMENT, byte_tokenizer

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    try:
        model = build_family(model_type)
    except Unbuildable as exc:
        return FamilyRow(model_type, "skip", reason=exc.reason, seconds=time.perf_counter() - t0)
    report = run_suite(model, byte_tokenizer(), label=model_type,
                       options=SuiteOptions(min_agreement=TINY_MIN_AGREEMENT))
    caps = {c.name: c for c in report.capabilities}
    exact, shifted = caps["exact_reuse"], caps["shifted_reuse"]
    failed = [f"{r.name}: {r.outcome.message}" for r in report.results if not r.ok]
    reasons = failed or [c.reason for c in (exact, shifted)
                         if c.status != "supported" and c.reason]
    return FamilyRow(model_type, "pass" if report.ok else "fail", exact.status, shifted.status,
                     "; ".join(dict.fromkeys(reasons)), time.perf_counter() - t0)


def _child(model_type: str, conn: Any) -> None:
    try:
        conn.send(asdict(_one(model_type)))
    except BaseException as exc:  # reported as the family's failure
        conn.send({"family": model_type, "status": "fail",
                   "reason": f"crashed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"})
    finally:
        conn.close()


def run_family(model_type: str, *, timeout_s: float = 300.0) -> FamilyRow:
    """One family in a child process (forked where the platform can: no second import of
    torch and transformers), bounded by ``timeout_s``; a crash is a failed row."""
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    ctx: Any = mp.get_context(method)
    receive, send = ctx.Pipe(duplex=False)
    t0 = time.perf_counter()
    proc = ctx.Process(target=_child, args=(model_type, send), daemon=True)
    proc.start()
    send.close()
    got = receive.poll(timeout_s)
    data = None
    if got:
        with contextlib.suppress(EOFError):
            data = receive.recv()
    proc.join(5.0)
    if proc.is_alive():
        proc.kill()
        proc.join()
    seconds = time.perf_counter() - t0
    if data is None:
        if not got:
            return FamilyRow(model_type, "timeout", reason=f"no result within {timeout_s:.0f} s",
                             seconds=seconds)
        return FamilyRow(model_type, "fail", reason=f"crashed (exit {proc.exitcode})",
                         seconds=seconds)
    return FamilyRow(**{**data, "seconds": seconds})


def run_matrix(families: Iterable[str], *, timeout_s: float = 300.0, workers: int = 1,
               progress: Callable[[FamilyRow], None] | None = None) -> list[FamilyRow]:
    """Rows for ``families``, in order, each run by :func:`run_family` (``workers`` at once)."""
    from concurrent.futures import ThreadPoolExecutor

    import torch

    torch.set_num_threads(1)
    from . import suite  # noqa: F401  (imported once, before forking)

    def one(family: str) -> FamilyRow:
        row = run_family(family, timeout_s=timeout_s)
        if progress is not None:
            progress(row)
        return row

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, families))


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def format_matrix(rows: Sequence[FamilyRow], *, transformers_version: str = "") -> str:
    """The Markdown capability matrix with the counts at the top."""
    count = {s: sum(r.status == s for r in rows) for s in ("pass", "fail", "skip", "timeout")}
    ran = [r for r in rows if r.status in ("pass", "fail")]
    shifted_ok = sum(r.shifted == "supported" for r in ran)
    shifted_na = sum(r.shifted == "not applicable" for r in ran)
    exact_ok = sum(r.exact == "supported" for r in ran)
    lines = [
        "# Capability matrix: every registered causal-LM family",
        "",
        "Generated by `percache conformance --all-families` "
        + (f"(transformers {transformers_version}) " if transformers_version else "")
        + "on tiny random fp32 models (2 layers, hidden 64, vocabulary 320, byte tokenizer; "
        "shifted reuse passes at top-1 agreement >= 0.5 on random weights).",
        "",
        f"- registered causal-LM families: **{len(rows)}**",
        f"- suite ran: {len(ran)} (all applicable checks passed: {count['pass']}, "
        f"failed: {count['fail']})",
        f"- exact reuse supported: {exact_ok}; shifted reuse supported: {shifted_ok}, "
        f"not applicable (with the suite's reason): {shifted_na}",
        f"- skipped (no tiny model could be built, reason given): {count['skip']}; "
        f"timed out: {count['timeout']}",
        "",
        "| family | result | exact reuse | shifted reuse | reason |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r.family} | {r.status} | {r.exact} | {r.shifted} | {_cell(r.reason)} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``--one TYPE`` prints one row as JSON (the subprocess side); otherwise run the families
    given (default: all registered) and write the Markdown matrix to ``--out``."""
    p = argparse.ArgumentParser(prog="python -m percache_plugin.conformance.matrix")
    p.add_argument("--one", default=None)
    p.add_argument("families", nargs="*")
    p.add_argument("--out", default=None)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--rows", default=None,
                   help="JSON-lines file of rows: read, families given are run again, written back")
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(asdict(_one(args.one))), flush=True)
        return 0
    from .families import registered_families

    everything = list(registered_families())
    kept: dict[str, FamilyRow] = {}
    if args.rows and os.path.exists(args.rows):
        with open(args.rows, encoding="utf-8") as fh:
            kept = {r.family: r for r in (FamilyRow(**json.loads(ln)) for ln in fh if ln.strip())}
    families = args.families or [f for f in everything if f not in kept]

    def record(row: FamilyRow) -> None:
        print(f"{row.family:<28} {row.status:<7} {row.exact:<15} {row.shifted:<15} "
              f"{row.reason[:120]}", flush=True)
        if args.rows:
            with open(args.rows, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(asdict(row)) + "\n")

    fresh = run_matrix(families, timeout_s=args.timeout, workers=args.workers, progress=record)
    kept.update({r.family: r for r in fresh})
    rows = [kept[f] for f in everything if f in kept] if args.rows else fresh
    import transformers

    text = format_matrix(rows, transformers_version=transformers.__version__)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        print(text)
    return 0 if all(r.status != "fail" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
