"""The ``percache`` console script.

Every command lives in its own module exposing ``add_arguments(parser)`` and ``run(args)``;
this file only maps command names to those modules. A command's module is imported only when
that command runs (``percache --help`` imports none of them, nor torch).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import NoReturn

from .cli_errors import EXIT_USAGE, USER_ERRORS, report

__all__ = ["main", "COMMANDS", "BENCHMARKS"]

# name -> (module, help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("percache_plugin.demo", "run the assistant demo on the bundled small model, or on yours with --model"),
    "plugins": ("percache_plugin.plugin_list", "list the loaded plugins and their hooks"),
    "trace": ("percache_plugin.buffer.cli_trace", "draw a block access trace and report its loops and hot set"),
    "sizing": ("percache_plugin.buffer.cli_sizing", "cache sizing: N <= S + BW x T, stall per token for a RAM budget"),
    "conformance": ("percache_plugin.conformance.cli",
                    "check percache's correctness and capabilities on a model"),
    "serve": ("percache_plugin.server.cli",
              "an OpenAI-compatible local server (chat page at /) over percache; needs [server]"),
    "store": ("percache_plugin.admin.cli",
              "look into a store and manage it: info, list, remove, purge, clear"),
    "memory": ("percache_plugin.memory.cli", "the memory of a store: list, search, forget facts; export the chat turn log"),
}
BENCHMARKS: dict[str, tuple[str, str]] = {
    "ttft": ("percache_plugin.bench.ttft", "time to first token: plain vs disk store cold/warm vs RAM tier vs in-memory ceiling (SmolLM2)"),
    "splice": ("percache_plugin.bench.splice", "shifted chunk reuse: quality and speed per recompute strategy"),
    "qa": ("percache_plugin.bench.qa", "QA-bank lookup latency: embed + retrieve + search + guards"),
    "idle": ("percache_plugin.bench.idle", "idle work: foreground latency under preemption, scheduler trade"),
    "offload": ("percache_plugin.bench.offload", "offloaded weights through the buffer cache: tokens/s and bytes/token vs sizing model"),
    "buffer": ("percache_plugin.bench.buffer", "buffer-cache policies: hit ratio vs cache size on K/V, chat and offload traces"),
    "memory": ("percache_plugin.bench.memory", "personal memory on LoCoMo: recall@k, F1, tokens and latency of full context, window, raw turns, facts"),
    "chat": ("percache_plugin.bench.chat", "chat sessions on LoCoMo: TTFT, tokens computed, resident K/V per turn"),
    "decode": ("percache_plugin.bench.decode", "decode speed with verified drafts vs plain greedy decoding (SmolLM2, QMSum)"),
    "serve": ("percache_plugin.bench.serve",
              "percache serve under 8 concurrent streaming chat clients vs the same server without percache (SmolLM2)"),
    "persona": ("percache_plugin.bench.persona", "persona switch (head K/V read from its snapshot) vs prefilling the persona prompt (SmolLM2)"),
    "e2e": ("percache_plugin.bench.e2e", "end-to-end replay of QMSum users: methods, latency, hit rates, quality"),
}


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error: the problem and where to look, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (hint: {self.prog} --help)\n")


def _add(sub: argparse._SubParsersAction, name: str, module: str, help_text: str, load: bool) -> None:
    p = sub.add_parser(name, help=help_text, description=help_text)
    if not load:  # listed in --help; its module is imported only when it runs
        return
    mod = importlib.import_module(module)
    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show the full traceback of an error instead of a one-line message")
    mod.add_arguments(p)
    p.set_defaults(run=mod.run)


def _chosen(argv: Sequence[str]) -> tuple[str | None, str | None]:
    """The command and the bench name ``argv`` asks for (top-level options are flags only)."""
    words = [a for a in argv if not a.startswith("-")]
    command = words[0] if words else None
    return command, (words[1] if command == "bench" and len(words) > 1 else None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the command it names has its module imported and its
    arguments added (None: every command, e.g. for documentation)."""
    command, bench_name = _chosen(argv) if argv is not None else (None, None)
    load_all = argv is None
    p = _Parser(prog="percache", description="percache: predictive cache for personal RAG")
    p.add_argument("--version", action="version", version=f"percache {_version()}")
    p.add_argument("--debug", action="store_true",
                   help="show the full traceback of an error instead of a one-line message")
    sub = p.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        _add(sub, name, module, help_text, load_all or name == command)
    bench = sub.add_parser("bench", help="benchmarks (see docs/BENCHMARKS.md)")
    bsub = bench.add_subparsers(dest="bench", required=True)
    for name, (module, help_text) in BENCHMARKS.items():
        _add(bsub, name, module, help_text, load_all or (command == "bench" and name == bench_name))
    return p


def _version() -> str:
    try:
        return metadata.version("percache-plugin")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(argv).parse_args(argv)
    try:
        result = args.run(args)
    except KeyboardInterrupt:
        print("percache: interrupted", file=sys.stderr)
        return 130
    except USER_ERRORS as exc:
        if args.debug:
            raise
        return report(exc)
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
