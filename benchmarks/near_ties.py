"""How often drafted decoding chooses a token whose top two scores lie within float rounding of
each other (``stats.draft_near_ties``, threshold :data:`~percache_plugin.decode.verify.NEAR_TIE`):
the only tokens that kernel rounding could make differ from plain decoding.

``ask()`` answers with SmolLM2 over QMSum meetings (one fresh store per meeting, drafting on, the
defaults otherwise); prints the totals of answers, new tokens, draft tokens verified and kept,
decode forwards and near ties.

    python benchmarks/near_ties.py [--data ../shared/data/qmsum] [--split test] [--meetings 3]
        [--questions 4] [--new-tokens 64]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

import percache_plugin as percache
from percache_plugin.bench.common import DEFAULT_QMSUM
from percache_plugin.bundled import load_smollm2
from percache_plugin.rag.qmsum import iter_meetings, meeting_text


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", type=Path, default=DEFAULT_QMSUM)
    p.add_argument("--split", default="test")
    p.add_argument("--meetings", type=int, default=3)
    p.add_argument("--questions", type=int, default=4, help="questions per meeting")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_smollm2()
    total = dict.fromkeys(("answers", "new", "drafted", "accepted", "forwards", "near_ties"), 0)
    meetings = list(iter_meetings(args.data, args.split))[:args.meetings]
    if not meetings:
        raise SystemExit(f"no QMSum meetings of split {args.split!r} under {args.data}")
    for meeting in meetings:
        with tempfile.TemporaryDirectory() as store:
            pc = percache.enable(model, tok, store=store)
            pc.add_documents({"text": meeting_text(meeting), "id": meeting.id})
            for query in meeting.queries[:args.questions]:
                s = pc.ask(query.text, max_new_tokens=args.new_tokens).stats
                if s is None:  # a QA-bank hit: nothing decoded
                    continue
                for key, value in (("answers", 1), ("new", s.new_tokens), ("drafted", s.tokens_drafted),
                                   ("accepted", s.tokens_accepted), ("forwards", s.decode_forwards),
                                   ("near_ties", s.draft_near_ties)):
                    total[key] += value
            pc.close()
    print(" ".join(f"{k}={v}" for k, v in total.items()))


if __name__ == "__main__":
    main()
