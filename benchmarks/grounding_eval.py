"""False flags of the answer grounding check (percache_plugin.rag.grounding) on good answers:
QMSum reference answers against the meeting turns they were written from (a specific query's
relevant spans; a general query's whole meeting). Every flag here is a false flag: a good
answer the QA bank would refuse to serve to paraphrases. Run from the repository root:

    python benchmarks/grounding_eval.py --qmsum ../shared/data/qmsum
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from percache_plugin.rag.grounding import check_grounding
from percache_plugin.rag.qmsum import iter_meetings


def _kind(fact: str) -> str:
    if fact[0].isdigit():
        return "number"
    return "name or calendar word"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--qmsum", type=Path, default=Path("../shared/data/qmsum"))
    p.add_argument("--split", default="test", choices=("train", "val", "test"))
    p.add_argument("--examples", type=int, default=8, help="flagged answers printed")
    p.add_argument("--names", action="store_true", help="check capitalized names too")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    total = flagged = superseded = 0
    by_kind: Counter[str] = Counter()
    per_kind_answers: Counter[str] = Counter()
    examples = []
    for m in iter_meetings(args.qmsum, args.split):
        for q in m.queries:
            turns = ([t for a, b in q.spans for t in m.turns[a:b + 1]] if q.spans else list(m.turns))
            sources = [f"{speaker}: {text}" for speaker, text in turns]
            g = check_grounding(q.answer, sources, names=args.names)
            total += 1
            if g.flagged:
                flagged += 1
                superseded += bool(g.superseded)
                kinds = {_kind(f) for f in g.unsupported}
                by_kind.update(_kind(f) for f in g.unsupported)
                per_kind_answers.update(kinds)
                if len(examples) < args.examples:
                    examples.append({"meeting": m.id, "query": q.text, "reasons": list(g.reasons()),
                                     "answer": q.answer[:200]})
    result = {"split": args.split, "names": args.names, "answers": total, "flagged": flagged,
              "false_flag_rate": flagged / total if total else 0.0,
              "flagged_for_superseded": superseded,
              "answers_flagged_by_kind": dict(per_kind_answers), "unsupported_facts_by_kind": dict(by_kind),
              "examples": examples}
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
