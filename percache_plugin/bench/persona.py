"""``percache bench persona``: what a persona switch costs (its head K/V read from the store)
against prefilling the persona's prompt, on SmolLM2, side by side in one run.

A persona prompt of about ``--tokens`` tokens (style rules, deterministic text). Parts, each
repeated ``--repeats`` times, interleaved, medians and interquartile ranges reported:

* ``head prefill``: one forward over the head's ids (template opening + prompt) into an empty
  cache (logits of the last position only, as ``generate`` computes them);
* ``head read (warm)`` / ``head read (cold)``: the head snapshot read from the store into a
  cache (``HeadSnapshots.get``: safetensors file, checksum, metadata), with the file in the OS
  page cache, or dropped from it first;
* first chat turn of a new session, time to first token: a session created with the prompt as
  its system prompt (the head is prefilled with the message), the persona without an adapter
  (head from its snapshot), and a persona with a LoRA adapter (random, ``init_lora_weights=False``,
  built with peft on the fly) with and without its snapshot (the adapter switch and the
  fingerprint check included).

``Config.session_blocks`` is off so stored prefix blocks do not serve the head to either side.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

from ..bundled import load_smollm2
from ..cache_arg import cache_kw
from ..personas.heads import HEADS_DIR, HeadSnapshots
from ..session.persist import SESSIONS_DB
from .common import THREADS_HELP, markdown_table, median, spread, write_json
from .ttft import drop_page_cache

__all__ = ["add_arguments", "run", "persona_prompt"]

_RULES = (
    "Answer in short, plain sentences and never use jargon without explaining it.",
    "Greet the user by name when you know it, and never invent a name.",
    "When a question is about dates, give the weekday together with the date.",
    "Prefer lists of at most five items; put the most important item first.",
    "If you are unsure, say so, and say what would settle the question.",
    "Keep a warm, calm tone, even when the user is upset or in a hurry.",
    "Quote numbers exactly as the user gave them; do not round them.",
    "Never give medical, legal or financial advice beyond pointing to a professional.",
    "When the user asks for a draft, write the draft first and explain nothing unless asked.",
    "Use the metric system unless the user uses other units first.",
    "Do not repeat the question back to the user before answering it.",
    "Sign drafted e-mails with the user's first name only.",
)


def persona_prompt(tokenizer: Any, tokens: int) -> str:
    """A persona prompt of at least ``tokens`` tokens: numbered style rules."""
    lines = ["You are Iris, a personal assistant who writes for a busy architect."]
    i = 0
    while len(tokenizer("\n".join(lines), add_special_tokens=False)["input_ids"]) < tokens:
        lines.append(f"Rule {i + 1}: {_RULES[i % len(_RULES)]}")
        i += 1
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", type=int, default=500, help="persona prompt length in tokens (at least)")
    p.add_argument("--repeats", type=int, default=7, help="repeats of every part (medians reported)")
    p.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    p.add_argument("--json", type=Path, default=None, help="write the results here as JSON")


def _lora(model: Any, path: Path) -> Path:
    import peft

    config = peft.LoraConfig(r=8, lora_alpha=16, init_lora_weights=False, task_type="CAUSAL_LM",
                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        peft.get_peft_model(copy.deepcopy(model), config).save_pretrained(str(path))
    return path


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.tokens < 1 or args.repeats < 1:
        raise ValueError("--tokens and --repeats must be at least 1")
    import percache_plugin as percache

    torch.set_num_threads(args.threads)
    model, tok = load_smollm2(status=True)
    model.eval()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        adapter = _lora(model, root / "lora")
        store = root / "store"
        pc = percache.enable(model, tok, store=store, session_blocks=False)
        prompt = persona_prompt(tok, args.tokens)
        pc.personas.add("plain", prompt)
        pc.personas.add("styled", prompt, adapter=adapter)
        head = pc.sessions.layout.head(prompt)[0]
        message = "Draft a two-line reply accepting Thursday's site visit."
        times: dict[str, list[float]] = {k: [] for k in (
            "head prefill", "head read (warm)", "head read (cold)", "turn: system prompt, prefilled",
            "turn: persona, snapshot", "turn: LoRA persona, no snapshot", "turn: LoRA persona, snapshot")}
        first = pc.chat(message, session="default", persona="plain", max_new_tokens=1)  # stores the head
        fp = pc.fingerprint
        snapshots = HeadSnapshots(store, store / SESSIONS_DB)
        same_first_token = True
        for r in range(args.repeats):
            with torch.inference_mode():
                times["head prefill"].append(_timed(lambda: model(  # K/V only: logits of one position
                    input_ids=torch.tensor([head]), **cache_kw(DynamicCache()), use_cache=True,
                    logits_to_keep=1)))

            def read() -> None:
                kv = snapshots.get(fp, head)
                assert kv is not None, "the head snapshot is missing"
                cache = DynamicCache()
                for i, (k, v) in enumerate(kv):
                    cache.update(k[None], v[None], i)

            times["head read (warm)"].append(_timed(read))
            drop_page_cache(store / HEADS_DIR)
            times["head read (cold)"].append(_timed(read))
            pc.sessions.create(f"sys{r}", system=prompt)
            plain = pc.chat(message, session=f"sys{r}", max_new_tokens=1)
            times["turn: system prompt, prefilled"].append(plain.stats.ttft_s)
            pc.sessions.create(f"p{r}")
            snap = pc.chat(message, session=f"p{r}", persona="plain", max_new_tokens=1)
            assert snap.stats.persona_head == "snapshot", snap.stats.persona_head
            times["turn: persona, snapshot"].append(snap.stats.ttft_s)
            same_first_token &= snap.token_ids == plain.token_ids == first.token_ids
            for arm, drop in (("turn: LoRA persona, no snapshot", True), ("turn: LoRA persona, snapshot", False)):
                if drop:  # every head snapshot file goes: the LoRA persona's head is prefilled
                    for f in (store / HEADS_DIR).rglob("*.safetensors"):
                        f.unlink()
                pc.sessions.create(f"l{r}{int(drop)}")
                reply = pc.chat(message, session=f"l{r}{int(drop)}", persona="styled", max_new_tokens=1)
                assert reply.stats.persona_head == ("stored" if drop else "snapshot"), reply.stats.persona_head
                times[arm].append(reply.stats.ttft_s)
            for name in (f"sys{r}", f"p{r}", f"l{r}1", f"l{r}0"):
                pc.sessions.delete(name)
            # the plain persona's snapshot went with the others: store it again
            pc.sessions.create(f"re{r}")
            pc.chat(message, session=f"re{r}", persona="plain", max_new_tokens=1)
            pc.sessions.delete(f"re{r}")
        snapshot_bytes = max(f.stat().st_size for f in (store / HEADS_DIR).rglob("*.safetensors"))
        snapshots.close()
        pc.close()
    rows, result = [], {}
    for name, xs in times.items():
        lo, hi = spread(xs)
        result[name] = {"median_ms": median(xs) * 1e3, "iqr_ms": [lo * 1e3, hi * 1e3], "runs_ms": [x * 1e3 for x in xs]}
        rows.append([name, f"{median(xs) * 1e3:.1f}", f"{lo * 1e3:.1f}-{hi * 1e3:.1f}"])
    ratio = median(times["head prefill"]) / median(times["head read (warm)"])
    ratio_cold = median(times["head prefill"]) / median(times["head read (cold)"])
    turn_ratio = median(times["turn: system prompt, prefilled"]) / median(times["turn: persona, snapshot"])
    lora_ratio = median(times["turn: LoRA persona, no snapshot"]) / median(times["turn: LoRA persona, snapshot"])
    print(f"SmolLM2-135M, {args.threads} thread(s), head of {len(head)} tokens "
          f"(persona prompt of {len(tok(prompt, add_special_tokens=False)['input_ids'])}), "
          f"snapshot file {snapshot_bytes / 1e6:.1f} MB, {args.repeats} repeats")
    print(markdown_table(["part", "median ms", "IQR ms"], rows))
    print(f"head prefill / read: {ratio:.1f}x warm, {ratio_cold:.1f}x cold; first-turn TTFT prefilled / "
          f"snapshot: {turn_ratio:.2f}x (no adapter), {lora_ratio:.2f}x (LoRA persona); "
          f"same first token with and without the snapshot: {same_first_token}")
    payload = {"head_tokens": len(head), "snapshot_bytes": snapshot_bytes, "threads": args.threads,
               "repeats": args.repeats, "parts": result, "prefill_over_read_warm": ratio,
               "prefill_over_read_cold": ratio_cold, "turn_ratio": turn_ratio, "lora_turn_ratio": lora_ratio,
               "same_first_token": same_first_token}
    write_json(args.json, payload)
    return payload
