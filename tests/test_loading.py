"""The status line shown while a model loads."""

from __future__ import annotations

import io
import sys
import time

import pytest

from percache_plugin.loading import loading_status, without_progress_bars

BAR = ("Converting and de-quantizing GGUF tensors...:   5%|▍         | 13/272 [00:02<00:33,  7.73it/s]"
       "\rConverting and de-quantizing GGUF tensors...: 100%|██████████| 272/272 [00:06<00:00, 41.99it/s]\n")


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_one_line_at_start_and_one_at_the_end_with_bars_left_out() -> None:
    out = io.StringIO()
    with loading_status("SmolLM2-135M-Instruct", "/models/smollm2.gguf", stream=out):
        sys.stderr.write(BAR)
        sys.stderr.write("UserWarning: something worth reading\n")
    lines = out.getvalue().splitlines()
    assert lines[0] == "percache: loading SmolLM2-135M-Instruct from /models/smollm2.gguf ..."
    assert lines[1].startswith("percache: loaded SmolLM2-135M-Instruct in ") and lines[1].endswith(" s")
    assert lines[2:] == ["UserWarning: something worth reading"]


def test_a_terminal_sees_the_seconds_tick() -> None:
    out = _Tty()
    with loading_status("m", "here", stream=out, tick_s=0.01):
        time.sleep(0.1)
    text = out.getvalue()
    assert text.startswith("percache: loading m from here ...") and "\rpercache: loading m from here ... 0 s" in text
    assert "\rpercache: loaded m in " in text and text.endswith("\n")


def test_a_failed_load_says_so_and_raises() -> None:
    out = io.StringIO()
    with pytest.raises(OSError), loading_status("m", "nowhere", stream=out):
        raise OSError("no such model")
    assert "percache: loading m failed after " in out.getvalue()


def test_without_progress_bars_keeps_other_lines() -> None:
    assert without_progress_bars(BAR + "a warning\n" + "Loading weights: 100%|█| 3/3 [00:00<00:00]\n") == "a warning\n"
