"""``percache serve``: load a model, enable percache, serve it over HTTP until interrupted."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cli_errors import UsageError
from .auth import Tokens, check_bind, parse_tokens, read_tokens_file
from .deps import require

__all__ = ["add_arguments", "run", "BUNDLED_NAMES"]

BUNDLED_NAMES = ("bundled", "smollm2")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="bundled",
                   help="'bundled' (SmolLM2-135M-Instruct, installed with the package), a local "
                        "Hugging Face model folder, a hub id already in the offline cache, or "
                        "tiny:<family> (a random test model)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16", "auto"),
                   help="dtype to load --model in (default float32)")
    p.add_argument("--store", type=Path, default=None,
                   help="store directory: K/V, documents and answers persist there "
                        "(default: in memory, gone when the server stops)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on; anything but loopback needs --token")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    p.add_argument("--token", action="append", default=[], metavar="NAME=SECRET",
                   help="accept 'Authorization: Bearer SECRET' for scope NAME (repeat for more "
                        "users; a bare SECRET is the unscoped data)")
    p.add_argument("--tokens-file", type=Path, default=None,
                   help="a file of NAME=SECRET lines (keeps secrets out of the process list)")
    p.add_argument("--name", default=None,
                   help="the model id clients send (default: 'smollm2' or the --model value)")
    p.add_argument("--max-tokens", type=int, default=256,
                   help="tokens generated when a request gives no max_tokens")
    p.add_argument("--no-idle", action="store_true",
                   help="do not run percache's idle work (predictions) between requests")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                   help="uvicorn's log level (default info); debug also logs every request")


def tokens_of(args: argparse.Namespace) -> Tokens:
    specs = list(args.token) + (read_tokens_file(args.tokens_file) if args.tokens_file else [])
    try:
        return Tokens(parse_tokens(specs))
    except ValueError as exc:
        raise UsageError(str(exc), "give --token NAME=SECRET") from None


def run(args: argparse.Namespace) -> None:
    require("starlette", "uvicorn")
    tokens = tokens_of(args)
    try:
        check_bind(args.host, tokens)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.max_tokens < 1:
        raise UsageError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    from ..conformance.load import SMOLLM2, load_model
    from ..handle import enable
    from .serve import serve
    from .state import ServerSettings

    name = SMOLLM2 if args.model in BUNDLED_NAMES else args.model
    try:
        model, tok = load_model(name, dtype=args.dtype, status=True)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot load {name!r}: {type(exc).__name__}: {exc}",
                         "give 'bundled', a local model folder or a hub id in the offline cache") from exc
    settings = ServerSettings(model_name=args.name or name, tokens=tokens,
                              default_max_tokens=args.max_tokens, idle_worker=not args.no_idle)
    pc = enable(model, tok, store=args.store)
    try:
        print(f"percache serve: {settings.model_name} on http://{args.host}:{args.port} "
              f"(chat page at /, OpenAI API at /v1; {pc.capabilities.summary()})", flush=True)
        serve(pc, settings, args.host, args.port, args.log_level)
    finally:
        pc.close()
    print("percache serve: stopped", flush=True)
