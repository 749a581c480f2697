"""The ``percache`` console script."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _plugins(args: argparse.Namespace) -> int:
    from .hooks.manager import AUTOLOAD_ENV, make_plugin_manager

    pm = make_plugin_manager()
    autoload = os.environ.get(AUTOLOAD_ENV, "") in ("", "0")
    print(f"entry-point autoload: {'on' if autoload else f'off ({AUTOLOAD_ENV} is set)'}")
    for name, plugin in pm.list_name_plugin():
        hooks = sorted(h.name for h in (pm.get_hookcallers(plugin) or []))
        print(f"{name}\n    hooks: {', '.join(hooks)}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from . import demo

    demo.run(args)
    return 0


def _bench_ttft(args: argparse.Namespace) -> int:
    from .bench import ttft

    ttft.run(args)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import demo
    from .bench import ttft

    p = argparse.ArgumentParser(prog="percache", description="percache: predictive cache for personal RAG")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run the default assistant on the bundled SmolLM2 model")
    demo.add_arguments(d)
    d.set_defaults(func=_demo)
    pl = sub.add_parser("plugins", help="list the loaded plugins and their hooks")
    pl.set_defaults(func=_plugins)
    b = sub.add_parser("bench", help="benchmarks")
    bsub = b.add_subparsers(dest="bench", required=True)
    bt = bsub.add_parser("ttft", help="time to first token: plain vs warm on-disk store (SmolLM2)")
    ttft.add_arguments(bt)
    bt.set_defaults(func=_bench_ttft)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
