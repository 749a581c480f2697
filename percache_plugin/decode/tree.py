"""Token trees: several candidate drafts verified in one forward.

A verify forward over SmolLM2 on one CPU thread costs about the same for 4 or 8 fed tokens
(:mod:`.cost`), so instead of one candidate draft a forward can feed a tree of them: the pending
token is the root, each candidate's tokens a path below it, candidates sharing a prefix share
nodes. Every node attends to the cached positions and to its own ancestors only (an additive
4D mask), and sits at the position of its depth, so its logits are those of the context ending
in its path: the model's choice after it, exactly as if that path had been fed alone (up to float
rounding, as for a chain of draft tokens). The loop then walks down from the root, following the
child equal to the token greedy decoding chooses, and keeps the K/V of the walked path only
(:func:`keep_path` moves it to consecutive slots; the caller crops the rest).

Which nodes to feed (:func:`plan_tree`): a node's chance of standing is the product along its path
of its draft kind's acceptance estimate (the schedule's ``p``), where a later sibling gets only
the chance left by the earlier ones (one token is greedy's choice, so siblings exclude each other).
Nodes are added best first (a child's chance never exceeds its parent's, so every prefix of that
order is a tree), and the size with the most expected tokens per unit of verify cost is fed; a
single chain is one such tree, so the plan never expects less than the schedule's best chain.

Limits (the loop verifies a single chain instead): the first forward of an answer; caches whose
layers are not plain ``DynamicLayer`` (sliding windows, quantized or static caches); and the
engine turns trees off for models with sliding-window or chunked attention (any layer type but
``full_attention``) or an extra mask function (``percache_mask_function``), which the explicit 4D
mask would bypass.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicLayer

from .acceptance import draft_kind
from .lookup import Draft
from .schedule import DraftSchedule

__all__ = ["TokenTree", "plan_tree", "tree_cache_ok", "keep_path", "tree_mask", "tree_positions",
           "tree_model_reason", "tree_usable"]


@dataclass
class TokenTree:
    """Draft tokens below the pending token (the root), in feed order (parents first).

    :ivar tokens: node ``i``'s token.
    :ivar parents: node ``i``'s parent node, -1 for a child of the root.
    :ivar depths: node ``i``'s depth (1 for a child of the root).
    :ivar owners: the draft whose path created node ``i``.
    :ivar drafts: every draft with nodes in the tree, and how many of its tokens (a prefix) are in it.
    :ivar expected: the expected number of draft tokens that stand (the plan's estimate).
    """

    tokens: list[int] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)
    depths: list[int] = field(default_factory=list)
    owners: list[Draft] = field(default_factory=list)
    drafts: dict[Draft, int] = field(default_factory=dict)
    expected: float = 0.0

    def __len__(self) -> int:
        return len(self.tokens)

    def child(self, parent: int, token: int) -> int:
        """The node below ``parent`` (-1: the root) holding ``token``, or -1."""
        for i, (p, t) in enumerate(zip(self.parents, self.tokens, strict=True)):
            if p == parent and t == token:
                return i
        return -1

    @property
    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))


def plan_tree(drafts: Sequence[Draft], schedule: DraftSchedule, max_nodes: int) -> TokenTree | None:
    """The tree of at most ``max_nodes`` nodes from ``drafts`` with the most expected tokens per
    unit of ``schedule.cost``, or None when no tree beats plain decoding by ``schedule.margin``."""
    if max_nodes <= 0 or not drafts:
        return None
    p = [schedule.p(draft_kind(d)) for d in drafts]
    # (negated chance, tie order, draft, depth index, parent node)
    heap: list[tuple[float, int, int, int, int]] = []
    order = 0
    for j, d in enumerate(drafts):
        if d.tokens:
            heap.append((-p[j], order, j, 0, -1))
            order += 1
    heapq.heapify(heap)
    tree = TokenTree()
    chance: list[float] = []
    taken: dict[int, float] = {}  # parent node -> summed chance (given the parent) of its children
    index: dict[tuple[int, int], int] = {}
    gains: list[float] = []
    while heap and len(tree) < max_nodes:
        neg, _, j, i, parent = heapq.heappop(heap)
        d, token = drafts[j], drafts[j].tokens[i]
        node = index.get((parent, token))
        if node is None:
            base = 1.0 if parent < 0 else chance[parent]
            q = p[j] * (1.0 - taken.get(parent, 0.0))  # siblings exclude each other
            if base * q < -neg - 1e-12:  # an earlier sibling took some of its chance: re-queue
                heapq.heappush(heap, (-base * q, order, j, i, parent))
                order += 1
                continue
            node = len(tree)
            index[(parent, token)] = node
            taken[parent] = taken.get(parent, 0.0) + q
            tree.tokens.append(token)
            tree.parents.append(parent)
            tree.depths.append(i + 1)
            tree.owners.append(d)
            chance.append(base * q)
            gains.append((gains[-1] if gains else 0.0) + base * q)
        tree.drafts[d] = i + 1
        if i + 1 < len(d.tokens):
            heapq.heappush(heap, (-chance[node] * p[j], order, j, i + 1, node))
            order += 1
    best, size = schedule.margin, 0
    for n, g in enumerate(gains, start=1):
        rate = (1.0 + g) / schedule.cost(n)
        if rate > best:
            best, size = rate, n
    if size == 0:
        return None
    return _first(tree, size, gains[size - 1])


def _first(tree: TokenTree, size: int, expected: float) -> TokenTree:
    """The first ``size`` nodes of ``tree`` (a tree again: parents come first)."""
    out = TokenTree(tree.tokens[:size], tree.parents[:size], tree.depths[:size], tree.owners[:size],
                    expected=expected)
    for d in tree.drafts:
        n = 0  # how many of d's leading tokens are nodes of the cut tree
        parent = -1
        for t in d.tokens:
            node = out.child(parent, t)
            if node < 0:
                break
            n, parent = n + 1, node
        if n:
            out.drafts[d] = n
    return out


def tree_mask(tree: TokenTree, past: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Additive mask ``[1, 1, 1 + len(tree), past + 1 + len(tree)]`` for feeding the root (the
    pending token) and the tree's nodes after ``past`` cached positions: each row sees every
    cached position, the root, its ancestors and itself; the dtype's minimum elsewhere."""
    n = len(tree) + 1
    allowed = torch.zeros(n, past + n, dtype=torch.bool, device=device)
    allowed[:, :past + 1] = True
    for i, parent in enumerate(tree.parents):
        row = i + 1
        allowed[row, past + row] = True
        if parent >= 0:
            allowed[row, past + 1:] |= allowed[parent + 1, past + 1:]
    mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def tree_positions(tree: TokenTree, root: torch.Tensor) -> torch.Tensor:
    """Position ids of the root and the nodes: ``root`` (shape ``[..., 1]``) plus each depth."""
    depth = torch.tensor([0, *tree.depths], dtype=root.dtype, device=root.device)
    return root + depth.view(*([1] * (root.dim() - 1)), -1)


TREE_LAYERS = ("DynamicLayer", "SpliceLayer", "DeferredLayer")
"""Cache layers whose slots :func:`keep_path` may move: ``DynamicLayer`` and percache's subclasses
that append like it (``SpliceLayer`` outside a splice; ``DeferredLayer``, whose stored parts are
joined into a tensor of its own at the first forward, before any tree is fed)."""


def tree_cache_ok(cache: Any) -> bool:
    """Whether :func:`keep_path` can move ``cache``'s slots: every layer one of
    :data:`TREE_LAYERS` with its keys and values as whole tensors, and no sliding window."""
    layers = getattr(cache, "layers", None)
    if layers is None:
        return False
    for layer in layers:
        if not isinstance(layer, DynamicLayer) or getattr(layer, "is_sliding", False):
            return False
        if type(layer).__name__ not in TREE_LAYERS:
            return False
    return True


def keep_path(cache: Any, past: int, path: Sequence[int]) -> None:
    """Move the K/V of the walked ``path`` (node indices, root excluded) to the slots right after
    the root (``past + 1, past + 2, ...``); the caller then crops what follows."""
    src = [past + 1 + node for node in path]
    dst = list(range(past + 1, past + 1 + len(path)))
    if src == dst:
        return
    for layer in cache.layers:
        for name in ("keys", "values"):
            t = getattr(layer, name)
            idx = torch.tensor(src, device=t.device)
            t[..., dst[0]:dst[-1] + 1, :] = t.index_select(-2, idx)


def tree_model_reason(model: Any) -> str:
    """Why token trees are not used for ``model`` ("" when they can be): sliding-window, local or
    chunked attention, or any layer type but ``full_attention`` (an explicit 4D mask replaces the
    model's own masks); ALiBi (its biases are built from a 2D mask); or no ``position_ids``
    argument."""
    import inspect

    if "position_ids" not in inspect.signature(model.forward).parameters:
        return "the model takes no position_ids"
    cfg = model.config.get_text_config(decoder=True)
    kinds = set(getattr(cfg, "layer_types", None) or ()) - {"full_attention"}
    if getattr(cfg, "sliding_window", None) is not None or "sliding_attention" in kinds:
        return "sliding-window attention"
    if getattr(cfg, "use_sliding_window", False):
        return "sliding-window attention"
    if kinds:  # chunked attention (Llama 4), or a kind whose mask percache does not build
        return f"layers of type {', '.join(sorted(map(str, kinds)))}: their mask is the model's own"
    if "local" in (getattr(cfg, "attention_layers", None) or ()):  # GPT-Neo's window_size layers
        return "local attention layers: their window is the model's own mask"
    if getattr(cfg, "alibi", False) is True or getattr(cfg, "position_embedding_type", "") == "alibi":
        return "ALiBi: its position biases are built from a 2D attention mask"
    return ""


def tree_usable(model: Any, extra_mask: Any) -> bool:
    """Whether drafted decoding of ``model`` may verify token trees: :func:`tree_model_reason` has
    nothing against it and no plugin ANDs an ``extra_mask`` into its masks (the explicit 4D tree
    mask would bypass it)."""
    return extra_mask is None and not tree_model_reason(model)
