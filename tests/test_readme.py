"""README.md's Python examples run as written, on a tiny model: each ```python block is
executed in order in one namespace, with only the stated substitutions (a loaded model, a
store, the documents, a short idle budget). A renamed argument or method fails here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

import percache_plugin as percache
from tests.helpers import tiny_pair

README = Path(__file__).resolve().parents[1] / "README.md"
EMAILS = ["Mail from Ana: the rehearsal moved to Friday 6 pm.", b"Notes: budget review on Monday.",
          {"text": "Chat: Carl brings the projector.", "id": "chat1", "scope": "alice",
           "metadata": {"from": "carl"}}]
# (text in the README, what runs instead): each must be found, so a README edit shows here
SUBSTITUTIONS = [
    ("model = AutoModelForCausalLM.from_pretrained(...)", "model = MODEL"),
    ("tok = AutoTokenizer.from_pretrained(...)", "tok = TOK"),
    ('store="~/.cache/percache/alice", reuse="shifted")', 'store=STORE, reuse="shifted", embedder="hash")'),
    ("pc.idle(budget_s=60,", "pc.idle(budget_s=2,"),  # a budget, not a duration
    ("pc.qa_bank.entries(); pc.correct(entry_id,", "entry_id = pc.qa_bank.entries()[0].id; pc.correct(entry_id,"),
    ("baseline = pc.generate([...])", "baseline = pc.generate(SEGMENTS, max_new_tokens=64)"),
]
SEGMENTS = ["You are my assistant.", "Mail from Ana: rehearsal moved to Friday.",
            "Notes: budget review on Monday.", "When is the rehearsal?"]


def _blocks() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    code = "\n# -- next block --\n".join(blocks)
    for old, new in SUBSTITUTIONS:
        assert code.count(old) == 1, f"README no longer has {old!r}"
        code = code.replace(old, new)
    return code.split("\n# -- next block --\n")


def test_the_readme_python_examples_run(tmp_path: Path) -> None:
    model, tok = tiny_pair("llama")
    ids = tok("Q: what is 2 plus 2? A: 4.\n" * 6 + "Q: what is 3 plus 3? A:")["input_ids"]
    ns: dict[str, Any] = {"MODEL": model, "TOK": tok, "STORE": str(tmp_path / "alice"), "emails": EMAILS,
                          "SEGMENTS": SEGMENTS, "torch": torch, "ids": ids, "model": model}
    ran = []
    for block in _blocks():
        if "OpenAI(" in block:
            continue  # needs a running server: tests/server runs these requests with the openai client
        if ran and "pc.close()" in ran[-1] and "percache.enable(" not in block:
            # the quick-start ends its handle; the later examples each assume an open one
            ns["pc"] = percache.enable(model, tok, store=ns["STORE"], embedder="hash")
        exec(compile(block, str(README), "exec"), ns)  # noqa: S102 - the README's own code
        ran.append(block)
        if "pc.ask(" in block:
            assert ns["ans"].source in ("qa_bank", "generated", "no_documents")
            assert ns["report"].summary()
        if "pc.sessions.fork(" in block:
            assert ns["reply"].turn_id is not None and "retry" in {s.name for s in ns["pc"].sessions.list()}
    assert len(ran) == 5
    assert ns["g"].stats.prompt_tokens > 0 and isinstance(ns["baseline"].text, str)
    assert ns["out"].shape[1] > len(ids)
    names = [name for name, _ in ns["pc"].plugins.list_name_plugin()]
    assert any(name.endswith("CountLayers") for name in names)
    ns["pc"].close()
