"""What the QA bank keeps in memory: one slot per entry (what search and the guards need)
and the question vectors, partitioned by (scope, model)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from percache_plugin.rag.guards import QuestionTerms, question_terms
from percache_plugin.rag.meaning import QuestionShape, question_shape
from percache_plugin.rag.qa_rows import RowInfo
from percache_plugin.rag.qa_vectors import Partition

__all__ = ["QAMemory", "Slot"]

PartKey = tuple[str | None, str]  # (scope, model)


@dataclass
class Slot:
    """One entry: its row (without vector and answer), staleness, and the question's
    key terms and shape, computed once."""

    info: RowInfo
    stale: bool
    terms: QuestionTerms = field(init=False)
    shape: QuestionShape = field(init=False)

    def __post_init__(self) -> None:
        self.terms = question_terms(self.info.question)
        self.shape = question_shape(self.info.question)


class QAMemory:
    """Slots, the (scope, model, question key) -> id map, and the vector partitions."""

    def __init__(self, exact_limit: int) -> None:
        self._exact_limit = exact_limit
        self.slots: dict[int, Slot] = {}
        self.keys: dict[tuple[str | None, str, str], int] = {}
        self.parts: dict[PartKey, Partition] = {}
        self.total = 0

    def put(self, info: RowInfo, vector: np.ndarray | None, dim: int | None) -> None:
        """Remember entry ``info.id``; ``vector`` may be omitted when the entry is known
        with the same scope, model and question key (its vector is unchanged)."""
        old = self.slots.get(info.id)
        same = old is not None and (old.info.scope, old.info.model, old.info.key) == (
            info.scope, info.model, info.key)
        if old is not None and (vector is not None or not same):
            if vector is None:
                raise ValueError(f"entry {info.id} changed its key; its vector is needed")
            self.forget(info.id)
            old = None
        if old is not None:  # same place in the index: replace the slot only
            self.total += info.nbytes - old.info.nbytes
            if old.info.question == info.question:
                old.info, old.stale = info, info.stale
            else:
                self.slots[info.id] = Slot(info, info.stale)
            return
        if vector is None or dim is None:
            raise ValueError(f"entry {info.id} is new; its vector is needed")
        self.slots[info.id] = Slot(info, info.stale)
        self.keys[(info.scope, info.model, info.key)] = info.id
        part_key = (info.scope, info.model)
        part = self.parts.get(part_key)
        if part is None:
            part = self.parts[part_key] = Partition(dim, self._exact_limit)
        part.add(info.id, vector)
        self.total += info.nbytes

    def forget(self, entry_id: int) -> None:
        slot = self.slots.pop(entry_id)
        info = slot.info
        if self.keys.get((info.scope, info.model, info.key)) == entry_id:
            del self.keys[(info.scope, info.model, info.key)]
        part_key = (info.scope, info.model)
        part = self.parts[part_key]
        part.remove(entry_id)
        if not len(part):
            del self.parts[part_key]
        self.total -= info.nbytes

    def search(self, vector: np.ndarray, k: int, scope: str | None, model: str,
               shared: bool) -> list[tuple[int, float]]:
        """The ``k`` most similar entries of ``scope`` answered by ``model`` (by any model
        when ``shared``), best first (ties: lower id)."""
        keys = [key for key in self.parts if key[0] == scope and (shared or key[1] == model)]
        found = [hit for key in keys for hit in self.parts[key].search(vector, k)]
        found.sort(key=lambda hit: (-hit[1], hit[0]))
        return found[:k]
