"""Predicted outputs (OpenAI's ``prediction``) on "rewrite this note with one change" requests:
greedy decode speed with the original note as the prediction against without one, side by side.

SmolLM2 on one thread. Each request is the server's chat path (the chat template's ids, then
``pc.complete``), greedy, run in four arms per repeat, their order rotated: ``prediction`` (the
original note given as ``prediction=``), ``drafts`` (drafting on, no prediction: the note is
still drafted from the prompt), ``prediction_alone`` (the prediction with the prompt left out
of the draft sources: what the prediction gives where the text is not in the prompt) and
``plain`` (``drafting=False``). Prints per request the
decode tokens/s of each arm (median over the repeats), the decode forwards of each arm (counts:
the same every repeat), the prediction tokens accepted and rejected, and whether the three
answers are the same tokens; then the medians of the per-request speed ratios and the totals.

    python benchmarks/predicted_outputs.py [--reps 3] [--threads 1] [--extra-tokens 24]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from typing import Any

import torch

import percache_plugin as percache
from percache_plugin.bundled import load_smollm2
from percache_plugin.decode.sources import PREDICTION
from percache_plugin.server.render import chat_ids

SYSTEM = "Rewrite the note exactly as it is, with only the requested change. Reply with the note alone."
# (note, change): hand-written notes of the kind a user asks to edit
NOTES: tuple[tuple[str, str], ...] = (
    ("Team meeting moved to Thursday at 3pm in room 204. Please bring the quarterly figures and "
     "your notes on the new supplier contract.", "Thursday becomes Friday."),
    ("Hi Ana, thanks for sending the draft. I read it over the weekend and I think the second "
     "section needs more detail on costs. Can we talk on Monday?", "Monday becomes Tuesday."),
    ("Shopping list: two litres of milk, a loaf of bread, six eggs, a bag of apples, coffee "
     "beans and washing-up liquid.", "Six eggs becomes twelve eggs."),
    ("Reminder: the library closes early on Friday at 5pm. Books due this week can be returned "
     "to the drop box by the main entrance.", "5pm becomes 4pm."),
    ("Dear Mr Patel, your order number 4471 has been shipped today and should arrive within "
     "three working days. Kind regards, the sales team.", "three working days becomes five working days."),
    ("Project status: the design is finished, testing started on Monday and the release is "
     "planned for the end of March if no major bugs are found.", "March becomes April."),
    ("Note to self: call the plumber about the kitchen sink, pay the electricity bill and book "
     "a table for Saturday dinner at the Italian place.", "Saturday becomes Sunday."),
    ("The rehearsal is on Wednesday evening at the community hall. Carl will bring the "
     "projector and Ben will prepare the slides.", "Carl becomes Dana."),
)
ARMS = ("prediction", "drafts", "prediction_alone", "plain")
SOURCES: dict[str, tuple[str, ...] | None] = {"prediction_alone": (PREDICTION, "output")}


def _decode_rate(stats: Any) -> float:
    """Decode tokens per second: the tokens after the first over the time after it."""
    return (stats.new_tokens - 1) / max(stats.total_s - stats.ttft_s, 1e-9)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3, help="repeats of each request and arm")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--extra-tokens", type=int, default=24, help="max_new_tokens beyond the note's length")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_smollm2()
    ratios: dict[str, list[float]] = {"prediction/drafts": [], "prediction/plain": [], "drafts/plain": [],
                                      "prediction_alone/plain": []}
    totals: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as store:
        pc = percache.enable(model, tok, store=store, predict="off", draft_calibrate_idle=False)
        for n, (note, change) in enumerate(NOTES):
            ids = chat_ids(tok, [{"role": "system", "content": SYSTEM},
                                 {"role": "user", "content": f"Note: {note}\nChange: {change}"}])
            limit = len(tok(note, add_special_tokens=False)["input_ids"]) + args.extra_tokens
            pc.complete(ids, max_new_tokens=1)  # the prompt's blocks stored: every arm reuses them
            rates: dict[str, list[float]] = {a: [] for a in ARMS}
            tokens: dict[str, list[int]] = {}
            forwards: dict[str, int] = {}
            kept: dict[str, int] = {}  # prediction tokens accepted / rejected per arm using it
            rejected: dict[str, int] = {}
            for rep in range(args.reps):
                for arm in ARMS[rep % len(ARMS):] + ARMS[:rep % len(ARMS)]:
                    pc.configure(drafting=arm != "plain", draft_sources=SOURCES.get(arm))
                    gen = pc.complete(ids, max_new_tokens=limit, do_sample=False,
                                      prediction=note if arm.startswith("prediction") else None)
                    rates[arm].append(_decode_rate(gen.stats))
                    tokens.setdefault(arm, gen.token_ids)
                    # counted by drafted decoding only; plain decoding runs one forward per token
                    forwards[arm] = gen.stats.decode_forwards if arm != "plain" else len(gen.token_ids)
                    assert gen.token_ids == tokens[arm], "an arm's answer changed between repeats"
                    if arm.startswith("prediction"):
                        kept[arm] = gen.stats.accepted_by_source.get(PREDICTION, 0)
                        rejected[arm] = gen.stats.drafted_by_source.get(PREDICTION, 0) - kept[arm]
            med = {a: statistics.median(r) for a, r in rates.items()}
            ratios["prediction/drafts"].append(med["prediction"] / med["drafts"])
            ratios["prediction/plain"].append(med["prediction"] / med["plain"])
            ratios["drafts/plain"].append(med["drafts"] / med["plain"])
            ratios["prediction_alone/plain"].append(med["prediction_alone"] / med["plain"])
            same = all(tokens[a] == tokens["plain"] for a in ARMS)
            for key, value in (("new", len(tokens["plain"])), *((f"accepted_{a}", v) for a, v in kept.items()),
                               *((f"rejected_{a}", v) for a, v in rejected.items()),
                               *((f"forwards_{a}", forwards[a]) for a in ARMS), ("identical", int(same))):
                totals[key] = totals.get(key, 0) + value
            print(f"note {n}: new={len(tokens['plain'])} tok/s "
                  + " ".join(f"{a}={med[a]:.1f}" for a in ARMS) + " forwards "
                  + " ".join(f"{a}={forwards[a]}" for a in ARMS)
                  + " accepted/rejected " + " ".join(f"{a}={kept[a]}/{rejected[a]}" for a in kept)
                  + f" identical={same}", flush=True)
        pc.close()
    print(" ".join(f"median {k}={statistics.median(v):.2f}x" for k, v in ratios.items()))
    print("totals " + " ".join(f"{k}={v}" for k, v in totals.items()))


if __name__ == "__main__":
    main()
