"""``percache conformance MODEL`` (and ``--builtin``): run the suite and print the results.

Wire it into the ``percache`` console script with :func:`add_arguments` and :func:`run`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TextIO

import torch

from .load import BUILTIN_MODELS, DTYPES, SMOLLM2, default_min_agreement, load_model
from .report import format_capability_table, format_report, progress_line, write_json
from .subject import SuiteOptions
from .suite import CHECKS, SuiteReport, run_suite

__all__ = ["add_arguments", "run", "main", "default_threads"]


def default_threads() -> int:
    """Half the CPU cores, at least one: intra-op threads that fight other processes for every
    core run several times slower than fewer threads that do not."""
    return max(1, (os.cpu_count() or 1) // 2)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", default=None,
                   help=f"model path or hub id (offline), '{SMOLLM2}' for the bundled GGUF, or "
                        "'tiny:<family>' for a built-in tiny random model")
    p.add_argument("--builtin", action="store_true",
                   help=f"run the default set: {', '.join(BUILTIN_MODELS)}")
    p.add_argument("--gguf-file", default=None, help="GGUF file inside MODEL to load")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                   help="dtype to load the model in (default float32, the exactness contract's)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="allow the model's own modeling code (only for models you trust)")
    p.add_argument("--json", dest="json_out", default=None, metavar="OUT",
                   help="write every result as JSON to OUT")
    p.add_argument("--check", action="append", default=None, metavar="NAME",
                   choices=[c.name for c in CHECKS], help="run only this check (repeatable)")
    p.add_argument("--min-agreement", type=float, default=None,
                   help="shifted-reuse pass threshold for top-1 agreement (default "
                        f"{SuiteOptions().min_agreement}; lower for the tiny random models)")
    p.add_argument("--max-window-tokens", type=int, default=SuiteOptions().max_window_tokens,
                   help="longest prompt the sliding-window check may build")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default: half the CPU cores, at least 1)")
    p.add_argument("--plugin", action="append", default=[], metavar="MODULE[:ATTR]",
                   help="register a plugin module, object or class on every handle (repeatable); "
                        "profiles for the engine itself come from the 'percache' entry points")


def _plugin(spec: str) -> object:
    """``module`` (its module-level hook implementations) or ``module:attr`` (an object, or a
    class instantiated without arguments)."""
    module, sep, attr = spec.partition(":")
    if not module or (sep and not attr):
        raise ValueError(f"--plugin expects MODULE or MODULE:ATTR, got {spec!r}")
    obj = importlib.import_module(module)
    if not attr:
        return obj
    found = getattr(obj, attr)
    return found() if isinstance(found, type) else found


def _run_one(name: str, args: argparse.Namespace, plugins: tuple[object, ...],
             out: TextIO) -> SuiteReport | None:
    print(f"== {name}: loading", file=out, flush=True)
    try:
        model, tokenizer = load_model(name, gguf_file=args.gguf_file, dtype=args.dtype,
                                      trust_remote_code=args.trust_remote_code)
    except Exception as exc:  # reported, and the exit code says so
        print(f"cannot load {name!r}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    threshold = args.min_agreement
    if threshold is None:
        threshold = default_min_agreement(name) or SuiteOptions().min_agreement
    options = SuiteOptions(min_agreement=threshold, max_window_tokens=args.max_window_tokens,
                           plugins=plugins)
    checks = args.check
    total = len(checks) if checks else len(CHECKS)
    counter = iter(range(1, total + 1))
    report = run_suite(model, tokenizer, label=name, options=options, checks=checks,
                       progress=lambda r: print(progress_line(r, next(counter), total),
                                                file=out, flush=True))
    print(format_report(report), file=out, flush=True)
    return report


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run the suite as the parsed ``args`` say: 0 if every applicable check passed, 1 if a
    check failed, 2 for bad arguments or a model that would not load."""
    out = out or sys.stdout
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.builtin == (args.model is not None):
        print("give a MODEL or --builtin (not both)", file=sys.stderr)
        return 2
    if args.builtin and args.gguf_file:
        print("--gguf-file applies to one MODEL, not to --builtin", file=sys.stderr)
        return 2
    if args.threads is not None and args.threads < 1:
        print(f"--threads must be at least 1, got {args.threads}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads or default_threads())
    try:
        plugins = tuple(_plugin(spec) for spec in args.plugin)
    except (ImportError, AttributeError, ValueError) as exc:
        print(f"cannot load plugin: {exc}", file=sys.stderr)
        return 2
    names = list(BUILTIN_MODELS) if args.builtin else [args.model]
    ran = [_run_one(name, args, plugins, out) for name in names]
    reports = [r for r in ran if r is not None]
    print("\nCapabilities", file=out)
    print(format_capability_table(reports), file=out, flush=True)
    if args.json_out:
        write_json(reports, args.json_out)
        print(f"results written to {args.json_out}", file=out)
    if len(reports) < len(ran):
        return 2
    return 0 if all(r.ok for r in reports) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (``python -m percache_plugin.conformance.cli``)."""
    p = argparse.ArgumentParser(prog="percache conformance",
                                description="check percache's correctness on a model")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
