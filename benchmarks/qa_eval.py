"""QA-bank guard evaluation on QMSum: hit rate on true paraphrases and false-hit rate on
hard negatives, against the similarity threshold tau, for each guard setting.

The evaluation set (built here, deterministic):

- Meetings of each chosen split (default test and val) are taken series by series
  (``ES2004a..d``, ``Bed003/008/016``...). Meetings at even positions of their series
  are *stored*: every QMSum query of theirs is in the QA bank, with its reference
  answer and, as sources, the top-3 chunks the hybrid index retrieves for it in its
  meeting. Meetings at odd positions are *fresh*:
  their transcripts are in the knowledge bank but no question about them was answered.
- Positives: hand-written user paraphrases of stored queries
  (``benchmarks/data/qa_paraphrases.json``), asked about the same meeting. A hit serves
  the paraphrased query's reference answer; serving another entry is a wrong answer.
- Hard negatives (``benchmarks/data/qa_negatives.json``, written by this script with ``--negatives-out``), where
  serving any stored answer is a false hit:
  ``cross_meeting``: a stored query, same wording, asked about the fresh meeting next to
  it in its series ("Summarize the whole meeting." of ES2004b when ES2004a's is stored);
  ``person_swap``: the person in a stored query replaced by another speaker of the
  meeting ("What did Grad B say ..." -> "What did Grad D say ...");
  ``topic_swap``: a topic of the meeting's topic list in the query replaced by another
  of its topics; ``object_swap``: for queries naming no listed topic, the object of
  "about/on ..." replaced by a meeting topic. A generated negative is dropped when a stored
  query of that meeting already asks about the swapped-in person or topic (the bank might
  rightly hold its answer) or when it repeats a stored query.

Guard settings (see ``SETTINGS``): ``plain`` (no scopes: one unscoped bank, where
identical questions of different meetings collapse into one entry); ``scope`` (entries
and questions carry their meeting); ``consistency`` (a hit needs ``--min-overlap`` of the
entry's top-3 source chunks among the top ``--check-k`` chunks retrieved for the new
question); ``terms`` (the key-terms guard: names, acronyms and numbers must agree); ``meaning``
(the meaning guards named by ``--meaning``, by default the default ones); and
their combinations. Retrieval itself is always restricted to the question's meeting (the
knowledge bank knows which meeting is asked about; the settings differ only in the QA
bank). Every lookup goes through ``QABank.lookup``.

Reported per tau (0.50..0.98, step 0.02) and setting: hit rate (paraphrases served their
own reference answer), wrong-answer rate (paraphrases served another entry), false-hit
rate on all negatives and on the same-meeting ones (person/topic/object swaps).

Example (about 10 minutes on 2 CPU cores, 2 with ``--cache`` filled)::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/qa_eval.py \\
        --data ../shared/data/qmsum --out docs/ --cache /tmp/qa-eval-cache
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np

from percache_plugin.rag.embeddings import Embedder, load_embedder
from percache_plugin.rag.guards import (
    DEFAULT_MEANING_GUARDS,
    DEFAULT_MIN_OVERLAP,
    DEFAULT_TAU,
    MEANING_GUARDS,
)
from percache_plugin.rag.index import HybridIndex
from percache_plugin.rag.qa_bank import QABank
from percache_plugin.rag.qmsum import Meeting, chunk_meeting, iter_series

DATA_DIR = Path(__file__).resolve().parent / "data"
# name -> (entries and questions carry their meeting, consistency guard, key-terms guard,
# meaning guards, label)
SETTINGS: dict[str, tuple[bool, bool, bool, bool, str]] = {
    "plain": (False, False, False, False, "plain similarity"),
    "scope": (True, False, False, False, "+ scope"),
    "consistency": (False, True, False, False, "+ retrieval consistency"),
    "terms": (False, False, True, False, "+ key terms"),
    "scope+consistency": (True, True, False, False, "+ scope + consistency"),
    "scope+terms": (True, False, True, False, "+ scope + key terms"),
    "all": (True, True, True, False, "+ scope + consistency + key terms"),
    "all+meaning": (True, True, True, True, "+ scope + consistency + key terms + meaning"),
}
TAUS = tuple(round(t, 2) for t in np.arange(0.50, 0.981, 0.02))
SOURCE_K = 3
_STOP = frozenset("the a an of and on in for to with about its their is was s".split())
# Words too common in a meeting's queries to tie a topic to one question (5-letter stems).
_GENERIC = frozenset("remot contr discu meeti desig proje produ issue new".split())
_AMI_ROLES = MappingProxyType(
    {  # canonical label -> how queries write it
        "Project Manager": r"project manager",
        "Industrial Designer": r"industrial design(?:er)?|industrial manager",
        "User Interface": r"user interface(?: designer)?",
        "Marketing": r"marketing(?: expert)?",
    }
)
# A role word names a person (not a topic such as "user interface design") when a verb
# or possessive follows it, or "by/with/did/of/and" precedes it.
_PERSON_AFTER = re.compile(
    r"(?:'s|’s)|\s+(?:think|thought|say|said|suggest|suggested|recommend|propose|proposed|"
    r"explain|disagree|disapprove|mean|believe|agree|and|opinion|report)\b",
    re.IGNORECASE,
)
_PERSON_BEFORE = re.compile(r"\b(?:by|with|did|of|and)\s+(?:the\s+)?$", re.IGNORECASE)
_TITLE = re.compile(r"^(?:Right Hon\.|Hon\.|Mr\.|Mrs\.|Ms\.|Dr\.?|The)\s+")
_TOPIC_LEAD = re.compile(
    r"^(?:(?:presentation|discussions?)(?: and discussion)? (?:about|on) |the |an? )+",
    re.IGNORECASE,
)
_META_TOPIC = re.compile(
    r"agenda|preliminar|wrap|review of|summary (?:of|about)|tool training|team building|"
    r"introduction|last meeting|petitions from|tabling|statements by",
    re.IGNORECASE,
)
# The topic is only the setting of the question ("... when discussing X"): swapping it
# does not clearly change the answer, so such matches are not swapped.
_CONTEXT_CLAUSE = re.compile(
    r"(?:when|while) (?:discussing|talking about|presenting|making|judging)(?: the)?\s*$|"
    r"in the discussion (?:of|about)(?: the)?\s*$|as a part of(?: the)?\s*$",
    re.IGNORECASE,
)
_OBJECT = re.compile(r"\b(about|on|regarding)\s+(?:the\s+)?([^?.]+?)\s*([?.]?)$", re.IGNORECASE)


@dataclass(frozen=True)
class Probe:
    """A question asked of the QA bank; ``expected`` is the answer a hit must serve
    (``None`` for negatives, where any served answer is a false hit)."""

    kind: str
    meeting: str
    text: str
    source_query: str
    expected: str | None = None


def content_words(text: str) -> set[str]:
    """Lower-cased words that are not stop words, cut to 5 letters (a crude stem:
    "intentionality" and "intentions" share one)."""
    return {w[:5] for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP}


def norm(text: str) -> str:
    return " ".join(re.findall(r"\w+", text.lower()))


def split_meetings(data: Path, split: str) -> tuple[list[Meeting], list[Meeting], dict[str, str]]:
    """Stored meetings, fresh meetings, and for each stored meeting its fresh sibling."""
    stored, fresh, sibling = [], [], {}
    for _, meetings in iter_series(data, split):
        for i, meeting in enumerate(meetings):
            (stored if i % 2 == 0 else fresh).append(meeting)
        for i in range(0, len(meetings), 2):
            j = i + 1 if i + 1 < len(meetings) else i - 1
            if j >= 0:
                sibling[meetings[i].id] = meetings[j].id
    return stored, fresh, sibling


# -- hard negatives ----------------------------------------------------------------------


def person_patterns(meeting: Meeting) -> dict[str, tuple[re.Pattern[str], bool]]:
    """Canonical speaker name -> (pattern finding it in a query, needs person context)."""
    labels = sorted({speaker for speaker, _ in meeting.turns})
    if set(labels) <= set(_AMI_ROLES):
        return {
            r: (re.compile(rf"\b(?:{p})\b", re.IGNORECASE), True) for r, p in _AMI_ROLES.items()
        }
    people: dict[str, tuple[re.Pattern[str], bool]] = {}
    professors = [lb for lb in labels if lb.startswith("Professor")]
    for label in labels:
        core = label.split(" (")[0].removesuffix(" AM")
        core = _TITLE.sub("", _TITLE.sub("", core)).strip()
        if core == "Chair" or len(core) < 3:
            continue
        pattern = rf"(?:(?:Right Hon\.|Hon\.|Mr\.|Mrs\.|Ms\.|Dr\.?)\s+)?\b{re.escape(core)}\b"
        if label in professors and len(professors) == 1:  # queries say "the professor"
            pattern = r"(?:the\s+)?\bprofessor\b(?:\s+[A-Z]\b)?"
        people[core] = (re.compile(pattern, re.IGNORECASE), False)
    return people


def find_person(
    query: str, people: dict[str, tuple[re.Pattern[str], bool]]
) -> tuple[str, re.Match[str]] | None:
    found = []
    for name, (pattern, needs_context) in people.items():
        for m in pattern.finditer(query):
            if (
                not needs_context
                or _PERSON_AFTER.match(query, m.end())
                or _PERSON_BEFORE.search(query[: m.start()])
            ):
                found.append((m.start(), name, m))
                break
    return (found[0][1], found[0][2]) if (found := sorted(found, key=lambda f: f[0])) else None


def topic_pattern(topic: str) -> re.Pattern[str]:
    words = re.findall(r"[a-z0-9]+", topic.lower())
    body = r"\W+(?:the\W+|a\W+)?".join(re.escape(w) + r"(?:s|es)?" for w in words)
    return re.compile(rf"\b{body}\b", re.IGNORECASE)


def as_object(topic: str) -> str:
    """A topic-list entry as the object of "about ...": "Discussion about X" -> "X"."""
    topic = _TOPIC_LEAD.sub("", topic)
    return topic if topic[:2].isupper() else topic[:1].lower() + topic[1:]


def swap_targets(options: list[str], old: str, avoid: str) -> list[str]:
    """Topics after ``old`` in cyclic order that are about content (not agenda, wrap-up,
    review...) and share no content word with ``avoid``."""
    start = options.index(old) + 1 if old in options else 0
    ordered = options[start:] + options[:start]
    return [
        o
        for o in ordered
        if o != old and not _META_TOPIC.search(o) and not content_words(o) & content_words(avoid)
    ]


def negatives_for(meeting: Meeting, stored_texts: list[str]) -> list[Probe]:
    """Person, topic and object swaps of every stored query of ``meeting``."""
    people = person_patterns(meeting)
    topics = [t.text for t in meeting.topics]
    known = {norm(t) for t in stored_texts}
    out: list[Probe] = []

    def mentions_person(new: str, old: str, source: str) -> bool:
        """Does another stored query ask about person ``new`` (and not ``old``)?"""
        new_p, old_p = people[new][0], people[old][0]
        return any(new_p.search(t) and not old_p.search(t) for t in stored_texts if t != source)

    def mentions_topic(topic: str, source: str) -> bool:
        """Does another stored query share a (non-generic) content word with ``topic``?"""
        words = content_words(topic) - _GENERIC
        return any(words & content_words(t) for t in stored_texts if t != source)

    def keep(kind: str, text: str, source: str) -> None:
        if norm(text) not in known and all(p.text != text for p in out):
            out.append(Probe(kind, meeting.id, text, source))

    for query in dict.fromkeys(stored_texts):
        person = find_person(query, people)
        if person is not None:
            name, m = person
            names = list(people)
            start = names.index(name) + 1
            for other in [
                p
                for p in names[start:] + names[:start]
                if p != name and not people[p][0].search(query)
            ]:
                if not mentions_person(other, name, query):
                    keep("person_swap", query[: m.start()] + other + query[m.end() :], query)
                    break
        matched = [(t, m) for t in topics if (m := topic_pattern(as_object(t)).search(query))]
        matched = [(t, m) for t, m in matched if not _CONTEXT_CLAUSE.search(query[: m.start()])]
        if matched:
            topic, m = max(matched, key=lambda tm: len(tm[1].group()))
            for other in swap_targets(topics, topic, m.group()):
                if not mentions_topic(other, query):
                    keep(
                        "topic_swap",
                        query[: m.start()] + as_object(other) + query[m.end() :],
                        query,
                    )
                    break
        elif (
            (m := _OBJECT.search(query)) is not None
            and person is None
            and not re.match(r"in\b", m.group(2))
        ):
            for other in swap_targets(topics, "", m.group(2)):
                if not mentions_topic(other, query):
                    keep(
                        "object_swap",
                        query[: m.start(2)] + as_object(other) + query[m.end(2) :],
                        query,
                    )
                    break
    return out


# -- building the set --------------------------------------------------------------------


@dataclass
class EvalSet:
    stored: list[tuple[str, str, str]]  # (meeting, query, answer)
    probes: list[Probe]
    meetings: list[Meeting]


def build_eval_set(data: Path, splits: list[str], paraphrase_file: Path) -> EvalSet:
    stored, fresh, sibling = [], [], {}
    for split in splits:
        s, f, sib = split_meetings(data, split)
        stored, fresh, sibling = stored + s, fresh + f, {**sibling, **sib}
    by_id = {m.id: m for m in stored + fresh}
    entries = [(m.id, q.text, q.answer) for m in stored for q in m.queries]
    probes: list[Probe] = []
    pairs = json.loads(paraphrase_file.read_text("utf-8"))["pairs"]
    answers = {(m, q): a for m, q, a in entries}
    for pair in pairs:
        key = (pair["meeting"], pair["query"])
        if key not in answers:
            raise ValueError(f"{paraphrase_file}: {key} is not a query of a stored meeting")
        probes.append(Probe("paraphrase", key[0], pair["paraphrase"], key[1], answers[key]))
    for meeting in stored:
        texts = [q.text for q in meeting.queries]
        if meeting.id in sibling:
            probes += [
                Probe("cross_meeting", sibling[meeting.id], t, t) for t in dict.fromkeys(texts)
            ]
        probes += negatives_for(meeting, texts)
    return EvalSet(entries, probes, [by_id[i] for i in sorted(by_id)])


def chunk_vectors(chunks: list, embedder: Embedder, cache: Path | None) -> np.ndarray:
    ids = "\n".join(c.id for c in chunks)
    tag = hashlib.sha256(f"{embedder.name}\n{ids}".encode()).hexdigest()[:16]
    path = None if cache is None else cache / f"qa-eval-chunks-{tag}.npy"
    if path is not None and path.is_file():
        return np.load(path, allow_pickle=False)
    vectors = embedder.embed([c.text for c in chunks])
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors, allow_pickle=False)
    return vectors


# -- running -----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, object]:
    embedder = load_embedder(None if args.embedder == "default" else args.embedder)
    ev = build_eval_set(args.data, args.splits, args.paraphrases)
    negatives = [
        {k: v for k, v in asdict(p).items() if k != "expected"}
        for p in ev.probes
        if p.expected is None
    ]
    if args.negatives_out is not None:  # only on request: a run over other splits would overwrite the committed set
        args.negatives_out.parent.mkdir(parents=True, exist_ok=True)
        lines = ",\n".join("  " + json.dumps(n, ensure_ascii=False) for n in negatives)
        args.negatives_out.write_text(
            f'{{"about": {json.dumps(NEGATIVES_ABOUT)},\n "negatives": [\n{lines}\n]}}\n', "utf-8"
        )

    chunks = [c for m in ev.meetings for c in chunk_meeting(m, args.target_words, scope=m.id)]
    index = HybridIndex(embedder.dim)
    index.add(chunks, chunk_vectors(chunks, embedder, args.cache))
    texts = list(dict.fromkeys([q for _, q, _ in ev.stored] + [p.text for p in ev.probes]))
    vec = dict(zip(texts, embedder.embed(texts), strict=True))

    def retrieve(text: str, meeting: str, k: int) -> list[str]:
        return [h.chunk_id for h in index.search(text, vec[text], k, scope=meeting)]

    banks = {
        "scoped": QABank(None, embedder, byte_limit=None),
        "unscoped": QABank(None, embedder, byte_limit=None),
    }
    for meeting, query, answer in ev.stored:
        sources = retrieve(query, meeting, SOURCE_K)
        banks["scoped"].add(query, answer, scope=meeting, sources=sources, embedding=vec[query])
        banks["unscoped"].add(query, answer, sources=sources, embedding=vec[query])
    checked = {k: {p: retrieve(p.text, p.meeting, k) for p in ev.probes} for k in (3, 5)}
    if args.check_k not in checked:
        checked[args.check_k] = {p: retrieve(p.text, p.meeting, args.check_k) for p in ev.probes}

    def score(
        setting: str,
        tau: float,
        check_k: int,
        min_overlap: float,
        examples: list[dict] | None = None,
    ) -> Counter[str]:
        scoped, consistency, terms, meaning, _ = SETTINGS[setting]
        bank = banks["scoped" if scoped else "unscoped"]
        tally: Counter[str] = Counter()
        for p in ev.probes:
            result = bank.lookup(
                p.text,
                tau=tau,
                embedding=vec[p.text],
                min_overlap=min_overlap,
                key_terms=terms,
                meaning=args.meaning if meaning else (),
                scope=p.meeting if scoped else None,
                retrieved=checked[check_k][p] if consistency else None,
            )
            served = None if result.match is None else result.match.entry.answer
            if served is not None and served != p.expected and examples is not None:
                examples.append(
                    {
                        "kind": p.kind,
                        "asked": p.text,
                        "meeting": p.meeting,
                        "served_question": result.match.entry.question,  # type: ignore[union-attr]
                        "served_scope": result.match.entry.scope,
                    }
                )  # type: ignore[union-attr]
            if p.expected is not None:
                tally["pos"] += 1
                tally["hit" if served == p.expected else "miss" if served is None else "wrong"] += 1
            else:
                within = "same_meeting" if p.kind != "cross_meeting" else "other"
                for key in ("neg", f"n:{p.kind}", f"n:{within}"):
                    tally[key] += 1
                if served is not None:
                    for key in ("false", f"false:{p.kind}", f"false:{within}"):
                        tally[key] += 1
        return tally

    kinds = [k for k in dict.fromkeys(p.kind for p in ev.probes) if k != "paraphrase"]
    taus = (args.tau,) if args.only_default_tau else TAUS
    rates: dict[str, list[dict[str, object]]] = {}
    errors: dict[str, list[dict]] = {}
    for setting in SETTINGS:
        rates[setting] = []
        for tau in taus:
            wrong: list[dict] = []
            c = score(setting, tau, args.check_k, args.min_overlap, wrong)
            if tau == args.tau:
                errors[setting] = wrong[:12]
            rates[setting].append(
                {
                    "tau": tau,
                    "hit_rate": c["hit"] / c["pos"],
                    "wrong_rate": c["wrong"] / c["pos"],
                    "false_hit_rate": c["false"] / c["neg"],
                    "false_hit_rate_same_meeting": c["false:same_meeting"] / c["n:same_meeting"],
                    "false_hits": {k: c[f"false:{k}"] for k in kinds},
                }
            )
    variants = []
    for check_k in (3, 5):
        for min_overlap in (1 / 3, 2 / 3, 1.0):
            c = score("all+meaning", args.tau, check_k, min_overlap)
            variants.append(
                {
                    "check_k": check_k,
                    "min_overlap": min_overlap,
                    "hit_rate": c["hit"] / c["pos"],
                    "false_hit_rate": c["false"] / c["neg"],
                }
            )
    probes = Counter(p.kind for p in ev.probes)
    report = {
        "embedder": embedder.name,
        "splits": args.splits,
        "stored_entries": len(ev.stored),
        "probes": dict(probes),
        "check_k": args.check_k,
        "min_overlap": args.min_overlap,
        "meaning_guards": list(args.meaning),
        "default_tau": args.tau,
        "taus": list(taus),
        "rates": rates,
        "consistency_variants_all_guards": variants,
        "wrong_serves_at_default": errors,
    }
    print_tables(report, args.tau)
    args.out.mkdir(parents=True, exist_ok=True)
    if len(taus) > 1:
        plot(report, args.out / "qa_bank_curve.png", args.tau)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n", "utf-8")
    return report


NEGATIVES_ABOUT = (
    "Hard negatives generated by benchmarks/qa_eval.py from the QMSum queries of stored meetings "
    "(test and val splits): cross_meeting (a stored query asked, same words, of the sibling meeting "
    "whose questions are not stored), person_swap, topic_swap, object_swap (see the script's "
    "docstring). Serving any stored answer for one of these is a false hit."
)


def print_tables(report: dict, tau: float) -> None:
    rates, probes = report["rates"], report["probes"]
    print(
        f"embedder {report['embedder']}; {report['stored_entries']} stored entries; probes {probes}"
    )
    print(
        f"consistency: top-{report['check_k']} retrieved, min_overlap {report['min_overlap']:.2f}; "
        f"meaning guards: {', '.join(report['meaning_guards'])}"
    )
    print(
        "cells: hit rate on paraphrases / false-hit rate on all negatives (on same-meeting ones)\n"
    )
    print("| tau | " + " | ".join(SETTINGS[s][-1] for s in SETTINGS) + " |")
    print("|---|" + "---|" * len(SETTINGS))
    for i, t in enumerate(report["taus"]):
        if i % 2 and t != tau:
            continue
        cells = [
            f"{r['hit_rate']:.0%} / {r['false_hit_rate']:.1%} ({r['false_hit_rate_same_meeting']:.1%})"
            for r in (rates[s][i] for s in SETTINGS)
        ]
        mark = f"**{t:.2f}**" if t == tau else f"{t:.2f}"
        print(f"| {mark} | " + " | ".join(cells) + " |")
    i = report["taus"].index(tau)
    kinds = list(rates["plain"][i]["false_hits"])
    print(
        f"\nfalse hits by kind of negative at tau {tau:.2f}, and paraphrases served a wrong answer:"
    )
    print("| setting | " + " | ".join(f"{k} (n={probes[k]})" for k in kinds) + " | wrong answers |")
    print("|---|" + "---|" * (len(kinds) + 1))
    for s in SETTINGS:
        r = rates[s][i]
        print(
            f"| {SETTINGS[s][-1]} | "
            + " | ".join(str(r["false_hits"][k]) for k in kinds)
            + f" | {r['wrong_rate']:.1%} |"
        )
    print(f"\nconsistency guard variants, all guards on, tau {tau:.2f}:")
    print("| retrieved top-k | min_overlap | hit rate | false-hit rate |\n|---|---|---|---|")
    for v in report["consistency_variants_all_guards"]:
        print(
            f"| {v['check_k']} | {v['min_overlap']:.2f} | {v['hit_rate']:.0%} | {v['false_hit_rate']:.1%} |"
        )


def plot(report: dict, path: Path, tau: float) -> None:
    """Hit rate, false-hit rate on all negatives and on same-meeting ones, against tau."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    probes = report["probes"]
    n_neg = sum(v for k, v in probes.items() if k != "paraphrase")
    n_same = n_neg - probes.get("cross_meeting", 0)
    panels = (
        (
            "hit_rate",
            "hit rate on true paraphrases (%)",
            f"paraphrases (n={probes['paraphrase']})",
            60,
        ),
        ("false_hit_rate", "false-hit rate (%)", f"all hard negatives (n={n_neg})", 2),
        (
            "false_hit_rate_same_meeting",
            "false-hit rate (%)",
            f"same-meeting negatives: person/topic/object swaps (n={n_same})",
            2,
        ),
    )
    fig, axes = plt.subplots(1, 3, figsize=(15, 5), sharex=True)
    colors = (
        "tab:gray",
        "tab:blue",
        "tab:orange",
        "tab:purple",
        "tab:green",
        "tab:olive",
        "tab:red",
        "tab:brown",
    )
    for ax, (key, ylabel, title, target) in zip(axes, panels, strict=True):
        for (setting, (*_, label)), color in zip(SETTINGS.items(), colors, strict=True):
            rows = report["rates"][setting]
            ax.plot(
                [r["tau"] for r in rows],
                [100 * r[key] for r in rows],
                color=color,
                label=label,
                marker=".",
                lw=2.2 if setting == "all+meaning" else 1.2,
            )
        ax.axhline(target, color="k", lw=0.8, ls=":")
        ax.axvline(tau, color="k", lw=0.8, ls="--")
        ax.set_xlabel(f"similarity threshold tau (cosine, {report['embedder'].split('/')[-1]})")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(-2, 102)
        ax.grid(alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=9, frameon=False)
    fig.suptitle(
        f"QA bank on QMSum ({'+'.join(report['splits'])}): dashed = default tau {tau:.2f}, "
        "dotted = targets (hit >= 60%, false hit <= 2%)"
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--data", type=Path, default=Path("../shared/data/qmsum"), help="QMSum root (holding ALL/)"
    )
    p.add_argument("--out", type=Path, default=Path("docs"), help="folder for qa_bank_curve.png")
    p.add_argument(
        "--json", type=Path, default=None, help="also write every number (and wrong serves) here"
    )
    p.add_argument(
        "--embedder",
        default="default",
        help="'default' (all-MiniLM-L6-v2), 'hash', or a model spec",
    )
    p.add_argument(
        "--splits",
        nargs="+",
        default=["test", "val"],
        choices=["train", "val", "test"],
        help="QMSum splits whose meetings are used (paraphrases exist for test)",
    )
    p.add_argument(
        "--target-words", type=int, default=100, help="chunk size for the knowledge bank"
    )
    p.add_argument(
        "--tau", type=float, default=DEFAULT_TAU, help="the default to mark and break down"
    )
    p.add_argument(
        "--check-k", type=int, default=SOURCE_K, help="chunks retrieved for the consistency guard"
    )
    p.add_argument(
        "--min-overlap", type=float, default=DEFAULT_MIN_OVERLAP, help="consistency guard threshold"
    )
    p.add_argument("--paraphrases", type=Path, default=DATA_DIR / "qa_paraphrases.json")
    p.add_argument("--negatives-out", type=Path, default=None,
                   help="write the hard negatives here (e.g. benchmarks/data/qa_negatives.json); default: write nothing")
    p.add_argument("--cache", type=Path, default=None, help="folder to cache chunk embeddings in")
    p.add_argument(
        "--meaning",
        default=",".join(sorted(DEFAULT_MEANING_GUARDS)),
        help="comma-separated meaning guards of the '+ meaning' setting (default: the defaults; "
        f"known: {','.join(MEANING_GUARDS)})",
    )
    p.add_argument(
        "--only-default-tau",
        action="store_true",
        help="score at --tau only (no sweep, no plot): a quick side-by-side run",
    )
    args = p.parse_args()
    args.meaning = tuple(g for g in args.meaning.split(",") if g)
    unknown = [g for g in args.meaning if g not in MEANING_GUARDS]
    if unknown:
        p.error(f"--meaning: unknown guard {unknown[0]!r}; known: {MEANING_GUARDS}")
    if round(args.tau, 2) not in TAUS:
        p.error(f"--tau must be one of the swept values {TAUS[0]}..{TAUS[-1]} step 0.02")
    args.tau = round(args.tau, 2)
    return args


if __name__ == "__main__":
    run(parse_args())
