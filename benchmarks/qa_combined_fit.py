"""Fit the combined guard's constants on dev data only, and print them with the trade-off.

Dev negatives: the LoCoMo same-topic pairs of conv-44/47/48 (``qa_locomo_negatives.json``, the
``dev`` split of ``qa_meaning_eval.py``). Dev positives: the ``dev`` rewordings of
``qa_opposites.json``, the ``dev`` LoCoMo paraphrases and the QMSum val-split paraphrases of
``qa_paraphrases_dev.json`` and ``qa_paraphrases_val2.json``. Only pairs that reach tau and pass
every other default guard matter (the others are decided elsewhere). For each, the four
features of :mod:`percache_plugin.rag.combined` are computed, and a logistic regression
(scikit-learn, class weights balanced, C=1) is fitted on them; its bias is then raised until at
most ``--budget`` (1.0%) of ALL the dev negatives pass: the align guard, set at 1.5% on dev,
served 2.3% of the held-out ones, so the margin under the 2% goal is wider here.

Also printed: out-of-fold figures of a 5-fold cross-validation (each fold's model and bias fitted
on the other four folds), an estimate of how the rule does on pairs it was not fitted on; and,
never fitted on, every ordered pair of two different queries of one QMSum val-split meeting (a
different question about the same meeting, often sharing a long clause). The held-out sets
(conv-49/50, the QMSum test-split paraphrases, ``qa_fresh_heldout.json``) are not read here.
The printed constants are the ones committed in ``percache_plugin/rag/combined.py``.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/qa_combined_fit.py \\
        --locomo ../shared/data/locomo/locomo_dev5.json --qmsum ../shared/data/qmsum
"""

from __future__ import annotations

import math

import numpy as np
from qa_align_fit import decided, same_meeting_pairs, val2_pairs  # benchmarks/ is sys.path[0]
from qa_guard_tune import dev_args, dev_pairs

from percache_plugin.rag.align import alignment
from percache_plugin.rag.combined import BIAS, FEATURES, WEIGHTS, features
from percache_plugin.rag.embeddings import load_embedder

BUDGETS = (0.006, 0.008, 0.010, 0.0125, 0.015)


def fit(x: np.ndarray, y: np.ndarray, n_neg: int, budget: float) -> tuple[np.ndarray, float]:
    """Weights and bias: the logistic fit, its bias moved so that at most ``budget`` of
    ``n_neg`` negatives (those in ``x`` with ``y == 0``; the rest never pass) pass."""
    from sklearn.linear_model import LogisticRegression  # a dependency of sentence-transformers

    model = LogisticRegression(C=1.0, class_weight="balanced", max_iter=2000).fit(x, y)
    w = model.coef_[0].astype(float)
    scores = np.sort(x[y == 0] @ w)[::-1]
    allowed = int(budget * n_neg)
    cut = float(scores[allowed]) if allowed < len(scores) else -np.inf
    # Rounded down to 4 decimals, so that the negative scoring ``cut`` (and any tied) fails.
    return np.round(w, 4), math.floor(-cut * 1e4 - 1) / 1e4


def main() -> None:
    args = dev_args(__doc__)
    args.budget = 0.010 if args.budget == 0.015 else args.budget
    from sklearn.model_selection import StratifiedKFold

    embedder = load_embedder(None)
    negs, pos = dev_pairs(args.locomo, args.qmsum)
    pos = pos + val2_pairs(args.qmsum)
    meeting = same_meeting_pairs(args.qmsum)
    texts = sorted({t for pair in negs + pos + meeting for t in pair})
    vec = dict(zip(texts, embedder.embed(texts), strict=True))
    sets = {"neg": decided(negs, vec, args.tau), "pos": decided(pos, vec, args.tau),
            "meeting": decided(meeting, vec, args.tau)}
    needed = sorted({t for rows in sets.values() for a, b, _ in rows for t in (a, b)})
    words = dict(zip(needed, embedder.embed_words(needed), strict=True))  # type: ignore[attr-defined]
    # (stored a, asked b): the asked question first, as the QA bank calls the guard.
    feats = {k: np.array([features(b, words[b], a, words[a]).row() for a, b, _ in rows])
             .reshape(-1, len(FEATURES)) for k, rows in sets.items()}
    aligned = {k: sum(alignment(words[b], words[a]).passes for a, b, _ in rows)
               for k, rows in sets.items()}
    x = np.vstack([feats["neg"], feats["pos"]])
    y = np.r_[np.zeros(len(feats["neg"])), np.ones(len(feats["pos"]))]
    n = {"neg": len(negs), "pos": len(pos), "meeting": len(meeting)}
    print(f"dev negatives {n['neg']} ({len(sets['neg'])} reach tau {args.tau} and pass the other "
          f"guards); dev positives {n['pos']} ({len(sets['pos'])}); QMSum val same-meeting "
          f"pairs {n['meeting']} ({len(sets['meeting'])})\n")
    print("| rule | dev negatives served | dev positives served | out-of-fold negatives | "
          "out-of-fold positives | QMSum val same-meeting served |")
    print("|---|---|---|---|---|---|")
    print(f"| align (in code) | {aligned['neg']} ({aligned['neg'] / n['neg']:.2%}) | "
          f"{aligned['pos']} / {n['pos']} | | | {aligned['meeting']} |")
    chosen = None
    for budget in BUDGETS:
        w, b = fit(x, y, n["neg"], budget)
        served = {k: int((f @ w + b >= 0).sum()) for k, f in feats.items()}
        oof = np.zeros(len(y), dtype=bool)
        for tr, te in StratifiedKFold(5, shuffle=True, random_state=0).split(x, y):
            # each training fold holds ~4/5 of the negatives that matter: scale the budget's base
            wf, bf = fit(x[tr], y[tr], int(n["neg"] * len(tr) / len(y)), budget)
            oof[te] = x[te] @ wf + bf >= 0
        on, op = int(oof[y == 0].sum()), int(oof[y == 1].sum())
        print(f"| budget {budget:.2%} | {served['neg']} ({served['neg'] / n['neg']:.2%}) | "
              f"{served['pos']} / {n['pos']} | {on} ({on / n['neg']:.2%}) | {op} / {n['pos']} | "
              f"{served['meeting']} ({served['meeting'] / n['meeting']:.2%}) |")
        if math.isclose(budget, args.budget):
            chosen = (w, b)
    if chosen is not None:
        w, b = chosen
        print(f"\nfitted at budget {args.budget:.2%}: WEIGHTS {tuple(float(v) for v in w)} "
              f"({', '.join(FEATURES)}), BIAS {b}")
    print(f"in code: WEIGHTS {WEIGHTS}, BIAS {BIAS}")


if __name__ == "__main__":
    main()
