"""What a build hands the builders of its components: :class:`BuildInputs`, the typed settings and the results one
build shares between its components, and :class:`CollectionWeights`, the learned weights of a whole collection from
which each shard of a shard set takes its documents' weights.

:func:`weir.indexer.build.build_index` makes the inputs; the component builders (:mod:`weir.indexer.weighting.build`,
the dense builder through :mod:`weir.indexer.build`) read them, and a distributed build
(:mod:`weir.indexer.distributed`) hands its workers' results over through them. What is computed once per build is
carried here rather than computed again by each component: the learned weights of every learned component (one
encoder pass when their heads share a backbone), and the dense vectors the workers encoded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from weir.core.types import Document, InputError
from weir.indexer.dense import DenseConfig


class LearnedWeights(NamedTuple):
    """One learned component's weights: the documents' ids; each document's (terms, weights), in the same order (a
    list, or a column read from a distributed build's block files as it is iterated); the model's description for
    the manifest."""

    docids: Sequence[str]
    weights: Iterable[tuple[list[str], np.ndarray]]
    model: dict


@dataclass
class BuildInputs:
    """What one build gives the builders of its components.

    - ``components``: the components built; the learned ones among them share an encoder pass where they can.
    - ``threads``: Lucene's indexing threads (None: all cores).
    - ``dense``: the dense component's settings (None when the build has no dense component).
    - ``learned``: the learned term weighting's settings: ``deepct_model``, ``deepimpact_model`` (trained model
      directories; absent or None: the shipped ones), ``device``, ``batch_size``.
    - ``corpus_sha256``: the corpus file's checksum, when the dense component reuses the vectors of another index
      (which must have been built from the same corpus); else None.
    - ``collection_weights``: for a shard of a shard set, the whole collection's learned weights, from which it takes
      its documents' (None: the build weighs its own documents).
    - ``dense_vectors``: vectors encoded elsewhere (by a distributed build's workers), as a function from a chunk of
      documents to their vectors (None: the dense builder encodes).
    - ``learned_memo``: kind -> the learned weights of the build's document pass (:mod:`weir.indexer.document_pass`)
      or of a distributed build's workers, read by the learned components' builders.
    - ``shared_dense``: the dense vectors of the document pass (:class:`SharedDense`), when the dense encoder is
      the pass's backbone (None: the dense builder encodes).
    - ``passage_states``: the manifest entry of the ``attention`` component the document pass wrote (None: not
      written).
    """

    components: tuple[str, ...]
    threads: int | None = None
    dense: DenseConfig | None = None
    learned: dict[str, Any] = field(default_factory=dict)
    corpus_sha256: str | None = None
    collection_weights: CollectionWeights | None = None
    dense_vectors: Callable[[list[Document]], np.ndarray] | None = None
    learned_memo: dict[str, LearnedWeights] = field(default_factory=dict)
    shared_dense: SharedDense | None = None
    passage_states: dict | None = None


class SharedDense:
    """Dense vectors from the term-weighting pass: each passage's first window pooled by the dense encoder, so that a
    build with both runs the backbone once per passage. ``data`` (float32 (n, dim); ``row``: document id -> row) for
    the passages that had a window; ``record``: what the manifest says of it (how many passages came from the pass,
    how many of those had a dense input other than a separate pass's, how many were encoded on their own)."""

    def __init__(self, row: dict[str, int], vectors: np.ndarray, record: dict):
        self.row, self.data, self.record = row, vectors, {**record, "encoded_separately": 0}

    @classmethod
    def of(cls, docs: Sequence[Document], pooled: Sequence[tuple[list[int], np.ndarray | None]], dim: int,
           record: dict | None = None) -> SharedDense:
        """From a pass's ``(window ids, pooled vector)`` per document of ``docs`` (``([], None)``: no window)."""
        had = [i for i, (ids, _) in enumerate(pooled) if ids]
        vectors = np.stack([pooled[i][1] for i in had]) if had else np.zeros((0, dim))
        return cls({docs[i].id: r for r, i in enumerate(had)}, vectors.astype(np.float32), record or {})

    def fresh(self) -> SharedDense:
        """The same vectors with counts of their own (a shard of a set takes its documents' from the set's pass)."""
        return SharedDense(self.row, self.data, {k: v for k, v in self.record.items() if k != "encoded_separately"})

    def vectors(self, chunk: Sequence[Document], encode) -> np.ndarray:
        """The vectors of ``chunk``: from the pass where it had a window, ``encode``d (texts -> vectors) otherwise."""
        rows = [self.row.get(d.id) for d in chunk]
        out = np.empty((len(chunk), self.data.shape[1]), dtype=np.float32)
        missing = [i for i, r in enumerate(rows) if r is None]
        present = [i for i, r in enumerate(rows) if r is not None]
        out[present] = self.data[[rows[i] for i in present]]
        if missing:
            out[missing] = encode([chunk[i].contents for i in missing])
            self.record["encoded_separately"] += len(missing)
        return out


def largest_impact(weights: Iterable[tuple[list[str], np.ndarray]]) -> float:
    """The largest weight of any document (0 for none): what DeepImpact's quantization scales by."""
    return max((float(w.max()) for _, w in weights if len(w)), default=0.0)


@dataclass
class CollectionWeights:
    """Every learned component's weights for each document of a whole collection (``memo``: kind -> its
    :class:`LearnedWeights`, lists, or the columns of a distributed build's block files) and the largest DeepImpact
    impact among them: computed once for all shards of a shard set, each taking its own documents' weights from it."""

    memo: dict[str, LearnedWeights]
    max_impact: float | None
    shared_dense: SharedDense | None = None  # the dense vectors of the same pass, where it gives them
    _row: dict[str, int] = field(default_factory=dict, init=False, repr=False)  # document id -> position

    @classmethod
    def of(cls, memo: dict[str, LearnedWeights]) -> CollectionWeights:
        """From the learned weights of a build over the whole collection: the largest impact read once."""
        return cls(memo, largest_impact(memo["deepimpact"].weights) if "deepimpact" in memo else None)

    def select(self, kind: str, documents: Iterable[Document]) -> LearnedWeights:
        """``kind``'s weights for ``documents``, in their order (the collection's: a shard's documents come in corpus
        order); each must be one the weights were computed for."""
        docids, weights, model = self.memo[kind]
        ids = [d.id for d in documents]
        if not isinstance(weights, list):  # block file columns: read as the builder iterates, never all held
            return LearnedWeights(ids, _Subset(docids, weights, ids), model)
        if not self._row:
            self._row.update((d, i) for i, d in enumerate(docids))
        missing = [d for d in ids if d not in self._row]
        if missing:
            raise InputError(_NO_WEIGHTS.format(missing[0]))
        return LearnedWeights(ids, [weights[self._row[d]] for d in ids], model)


_NO_WEIGHTS = ("document {!r} has no weights in this shard set's pass over the collection (did the corpus change "
               "during the build?); build again")


class _Subset:
    """The weights of ``ids`` (in corpus order) from whole-collection columns, each time it is iterated."""

    def __init__(self, docids, weights, ids: list[str]):
        self.docids, self.weights, self.ids = docids, weights, ids
        self.wanted = set(ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self):
        given = 0
        for d, w in zip(self.docids, self.weights):
            if d in self.wanted:
                if d != self.ids[given]:
                    raise InputError(_NO_WEIGHTS.format(self.ids[given]))
                given += 1
                yield w
        if given != len(self.ids):
            raise InputError(_NO_WEIGHTS.format(self.ids[given]))
