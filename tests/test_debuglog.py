"""The debug log shows without any logging set-up, and logs QA-bank hits; pc.stats() counts them."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_debug_log_without_basic_config_logs_requests_and_qa_hits() -> None:
    code = textwrap.dedent("""
        import percache_plugin as percache
        from tests.helpers import tiny_pair
        # The bank serves an answer only if its numbers are in a source: at the transformers
        # default init this model's 2-token answer has none (at the tiny default it is '8').
        model, tok = tiny_pair("llama", initializer_range=0.02)
        pc = percache.enable(model, tok, embedder="hash", predict="off", debug_log=True)
        pc.add_documents(["Ana: the choir rehearsal moved to Friday at 6 pm."], scope="me")
        pc.ask("When is the choir rehearsal?", scope="me", max_new_tokens=2)
        pc.ask("When is the choir rehearsal ?", scope="me", max_new_tokens=2)
        pc.ask("Anything?", scope="nobody", max_new_tokens=2)
        t = pc.stats()
        print("STATS", t.qa_lookups, t.qa_hits)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PERCACHE_DISABLE_PLUGIN_AUTOLOAD": "1",
                                        "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr[-2000:]
    assert "percache: percache request:" in res.stderr
    assert "percache QA hit: 'When is the choir rehearsal ?'" in res.stderr
    assert "percache no relevant documents for 'Anything?'" in res.stderr
    assert "STATS 3 1" in res.stdout  # three lookups, one hit
