"""``percache conformance MODEL`` (and ``--builtin``): run the suite and print the results.

Wire it into the ``percache`` console script with :func:`add_arguments` and :func:`run`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import torch

from ..cli_errors import UsageError, report
from .load import BUILTIN_MODELS, DTYPES, SMOLLM2, default_min_agreement, is_tiny, load_model
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
    p.add_argument("--all-families", action="store_true",
                   help="build a tiny random model of every causal-LM family transformers "
                        "registers, run the suite on each (own process, --family-timeout) and "
                        "print the capability matrix (Markdown; --matrix-out FILE writes it)")
    p.add_argument("--family-timeout", type=float, default=300.0,
                   help="seconds per family with --all-families (default 300)")
    p.add_argument("--matrix-out", default=None, metavar="FILE",
                   help="with --all-families: write the Markdown matrix to FILE")
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
    """``module`` (its module-level hook implementations), ``module:attr`` (an object, or a
    class instantiated without arguments), or the same with a ``.py`` file path as module."""
    module, sep, attr = spec.partition(":")
    if not module or (sep and not attr):
        raise UsageError(f"--plugin expects MODULE, MODULE:ATTR or FILE.py[:ATTR], got {spec!r}")
    try:
        obj = _import_file(module) if module.endswith(".py") or os.sep in module else importlib.import_module(module)
    except UsageError:
        raise
    except Exception as exc:  # the plugin's own code failed to import
        raise UsageError(f"cannot import plugin {module!r}: {type(exc).__name__}: {exc}",
                         "check the module name (importable from here) or give a FILE.py path") from exc
    if not attr:
        return obj
    if not hasattr(obj, attr):
        raise UsageError(f"plugin module {module!r} has no attribute {attr!r}",
                         "give MODULE:ATTR with ATTR a plugin object or class defined in it")
    found = getattr(obj, attr)
    return found() if isinstance(found, type) else found


def _import_file(path: str) -> object:
    file = Path(path).expanduser()
    if not file.is_file():
        raise UsageError(f"--plugin file {path!r} does not exist",
                         "give a .py file path or an importable module name")
    spec = importlib.util.spec_from_file_location(f"percache_plugin_file_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise UsageError(f"--plugin file {path!r} is not a Python module", "give a .py file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_model_name(name: str) -> None:
    """A path that does not exist fails here, with a message, instead of deep in transformers."""
    if is_tiny(name) or name == SMOLLM2:
        return
    looks_like_path = name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name
    if looks_like_path and not Path(name).expanduser().exists():
        raise UsageError(f"no model at {name!r}",
                         "give a local model folder (with config.json), a hub id already in the "
                         f"offline cache, '{SMOLLM2}', or 'tiny:<family>'")


def _run_one(name: str, args: argparse.Namespace, plugins: tuple[object, ...],
             out: TextIO) -> SuiteReport | None:
    print(f"== {name}: loading", file=out, flush=True)
    try:
        model, tokenizer = load_model(name, gguf_file=args.gguf_file, dtype=args.dtype,
                                      trust_remote_code=args.trust_remote_code)
    except Exception as exc:  # reported, and the exit code says so
        if not args.builtin:
            raise UsageError(f"cannot load {name!r}: {type(exc).__name__}: {exc}",
                             "give a local model folder (with config.json) or a hub id already "
                             "in the offline cache") from exc
        print(f"cannot load {name!r}: {type(exc).__name__}: {' '.join(str(exc).split())}",
              file=sys.stderr)
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
    if getattr(args, "all_families", False):
        return _all_families(args, out)
    if args.builtin == (args.model is not None):
        raise UsageError("give a MODEL or --builtin (not both)",
                         f"e.g. 'percache conformance {SMOLLM2}' or 'percache conformance --builtin'")
    if args.builtin and args.gguf_file:
        raise UsageError("--gguf-file applies to one MODEL, not to --builtin")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be at least 1, got {args.threads}")
    if not args.builtin:
        _check_model_name(args.model)
    plugins = tuple(_plugin(spec) for spec in args.plugin)
    torch.set_num_threads(args.threads or default_threads())
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


def _all_families(args: argparse.Namespace, out: TextIO) -> int:
    if args.builtin or args.model is not None:
        raise UsageError("--all-families runs every registered family: give no MODEL and no --builtin")
    import transformers

    from .families import registered_families
    from .matrix import format_matrix, run_matrix

    torch.set_num_threads(1)
    rows = run_matrix(registered_families(), timeout_s=args.family_timeout,
                      progress=lambda r: print(f"{r.family:<28} {r.status:<7} {r.exact:<15} "
                                               f"{r.shifted:<15} {r.reason[:100]}", file=out,
                                               flush=True))
    text = format_matrix(rows, transformers_version=transformers.__version__)
    if args.matrix_out:
        Path(args.matrix_out).write_text(text, encoding="utf-8")
        print(f"capability matrix written to {args.matrix_out}", file=out)
    else:
        print(text, file=out)
    return 0 if all(r.status != "fail" for r in rows) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry (``python -m percache_plugin.conformance.cli``)."""
    p = argparse.ArgumentParser(prog="percache conformance",
                                description="check percache's correctness on a model")
    add_arguments(p)
    try:
        return run(p.parse_args(argv))
    except UsageError as exc:
        return report(exc)


if __name__ == "__main__":
    sys.exit(main())
