"""A transformer encoder with a DeepCT or DeepImpact head, one weight per unique term of a passage.

Each passage is split into words and terms by :mod:`weir.indexer.weighting.terms`; the encoder reads the words
(``is_split_into_words``) in windows of at most ``max_length`` word pieces cut at word boundaries, so no term of a
long passage goes unweighted; a term is represented by the last hidden state of the first word piece of the word
where it first occurs. Heads:

- ``deepct``: ``Linear(dim, 1)`` (a regression of query term recall, unbounded);
- ``deepimpact``: ``Linear(dim, dim) -> ReLU -> Linear(dim, 1) -> ReLU`` (a non-negative impact).

A head has a ``shape`` (in its card):

- ``free`` (the published recipes): the head's output is the weight;
- ``bm25`` (the default since weir carries heads across collections): the weight is a BM25-shaped prior computed from
  the collection being indexed, times a bounded learned factor ``exp(ln 2 * tanh(o))`` in [1/2, 2] read from the
  term's vector (``o`` the head's output; its last layer starts at zero, so an untrained head is the prior exactly).
  DeepImpact's prior is the term's BM25 weight in the document (Lucene's idf, k1 0.9, b 0.4, the document's own length
  in terms); DeepCT's is the term frequency, written ten times finer (``tf' = round(10 tf factor)``) and searched with
  BM25 k1 9, b 0.4, which ranks as BM25 over the text does when the factor is 1. Out of domain such a head can only
  move a weight by a factor of two, and what it has not learned stays BM25.

A trained artifact is a directory: ``card.json`` (the model card: kind, shape, base model, data, command,
parameters, metrics) and ``head.pt`` (the head's state_dict; the backbone is loaded from ``base_model``, any Hugging
Face name or local path, unchanged). A head of several members (``"members": N`` in its card, `weir train
--members N`) keeps them all in that one state_dict (:mod:`weir.indexer.weighting.members`); ``"shrink": {"tau2": ...}``
in its card shrinks their mean correction towards the prior by their disagreement (`weir train --shrink`).

Trained by `weir train deepct|deepimpact` (:mod:`weir.training.term_weighting`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from weir.core import bm25
from weir.indexer.weighting.backbone import DEFAULT_INPUT, MAX_LENGTH, Backbone
from weir.core.provenance import sha256_file, write_card
from weir.core.types import InputError

KINDS = ("deepct", "deepimpact")
SHAPES = ("bm25", "free")
CARD = "card.json"
HEAD = "head.pt"
FEATURES = ("idf", "tf", "length")
BM25_K1, BM25_B = bm25.K1, bm25.B  # the prior of a BM25-shaped DeepImpact head, and the search of BM25-shaped DeepCT
FACTOR_LOG_BOUND = math.log(2.0)  # a BM25-shaped head multiplies its prior by a factor in [1/2, 2]
DEEPCT_RESOLUTION = 10  # BM25-shaped DeepCT writes tf' = round(10 * tf * factor), searched with k1 = 10 * 0.9


class CollectionTermCounts:
    """What a BM25-shaped prior needs of a whole collection: document frequencies, the number of documents and of
    terms. Gathered one document at a time (:meth:`add`), so a distributed build can give every worker the whole
    collection's statistics while each worker holds only its own block's documents."""

    def __init__(self):
        from collections import Counter

        self.df: Counter = Counter()
        self.n_docs = 0
        self.total_terms = 0

    def add(self, text: str) -> None:
        from weir.indexer.weighting.terms import terms

        ts = terms(text)
        self.df.update(set(ts))
        self.n_docs += 1
        self.total_terms += len(ts)

    def merge(self, other: CollectionTermCounts) -> CollectionTermCounts:
        """Add ``other``'s counts (another part of the same collection) to these; return self."""
        self.df.update(other.df)
        self.n_docs += other.n_docs
        self.total_terms += other.total_terms
        return self


class TermStatistics:
    """Term counts of every document and document frequencies of a corpus, for the optional lexical features.

    ``collection``: the statistics of the whole collection ``texts`` belong to (document ``i`` is then ``texts[i]``
    of a block, its frequencies and lengths its own, df and average length the collection's)."""

    def __init__(self, texts: Iterable[str], *, collection: CollectionTermCounts | None = None):
        from collections import Counter

        from weir.indexer.weighting.terms import terms

        self.counts = [Counter(terms(t)) for t in texts]
        if collection is None:
            self.df: Counter = Counter(t for c in self.counts for t in c)
            self.n_docs = len(self.counts)
            total = sum(sum(c.values()) for c in self.counts)
        else:
            self.df, self.n_docs, total = collection.df, collection.n_docs, collection.total_terms
        self.avgdl = max(total / max(self.n_docs, 1), 1e-9)

    def tf(self, i: int, doc_terms: Sequence[str]) -> np.ndarray:
        counts = self.counts[i]
        return np.array([counts.get(t, 0) for t in doc_terms], dtype=np.float64)

    def bm25(self, i: int, doc_terms: Sequence[str], k1: float = BM25_K1, b: float = BM25_B,
             tf: np.ndarray | None = None, length: float | None = None) -> np.ndarray:
        """Each term's BM25 weight in document ``i`` (Lucene's idf; the document's length in terms, over the corpus's
        mean); ``tf`` and ``length`` override the document's own (a document with a passage held out)."""
        tf = self.tf(i, doc_terms) if tf is None else np.asarray(tf, dtype=np.float64)
        length = sum(self.counts[i].values()) if length is None else length
        df = np.array([self.df.get(t, 0) for t in doc_terms], dtype=np.float64)
        idf = bm25.idf(self.n_docs, df)
        return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / self.avgdl))

    def prior(self, kind: str, i: int, doc_terms: Sequence[str]) -> np.ndarray:
        """The BM25-shaped prior of a ``kind`` head for the terms of document ``i``: the BM25 weight (DeepImpact), or
        the term frequency in the pseudo-document's units, ``tf * 10 / 100`` so that ``round(100 w) = 10 tf``."""
        if kind == "deepimpact":
            return self.bm25(i, doc_terms)
        return self.tf(i, doc_terms) * DEEPCT_RESOLUTION / 100.0

    def features(self, names: Sequence[str], i: int, doc_terms: Sequence[str]) -> np.ndarray:
        """(n_terms, len(names)) float32: ``idf`` = BM25 idf / 10, ``tf`` = log(1 + tf) / 3, ``length`` =
        log(1 + document terms) / 6 (scaled to the order of the hidden states)."""
        counts = self.counts[i]
        cols = []
        for name in names:
            if name == "idf":
                df = np.array([self.df.get(t, 0) for t in doc_terms], dtype=np.float64)
                cols.append(bm25.idf(self.n_docs, df) / 10)
            elif name == "tf":
                cols.append(np.log1p([counts.get(t, 1) for t in doc_terms]) / 3)
            elif name == "length":
                cols.append(np.full(len(doc_terms), math.log1p(sum(counts.values())) / 6))
            else:
                raise InputError(f"unknown term feature {name!r}; known: {', '.join(FEATURES)}")
        return np.stack(cols, axis=1).astype(np.float32) if cols else np.zeros((len(doc_terms), 0), np.float32)


def make_head(kind: str, dim: int, shape: str = "free", members: int = 1, shrink: float | None = None):
    """A head of this kind and shape; with ``members`` > 1, that many heads as one (:mod:`weir.indexer.weighting.members`),
    their mean correction shrunk towards the prior by their disagreement when ``shrink`` (tau2) is given."""
    import torch.nn as nn

    if shrink is not None and (members < 2 or shape != "bm25" or not shrink >= 0):
        raise InputError("shrinking a head towards its prior needs 2 members or more, the bm25 shape and tau2 >= 0")
    if members > 1:
        from weir.indexer.weighting.members import Members

        return Members([make_head(kind, dim, shape) for _ in range(members)], shape, FACTOR_LOG_BOUND, shrink)
    if kind not in KINDS:
        raise InputError(f"unknown term weighting head {kind!r}; known: {', '.join(KINDS)}")
    if shape == "bm25":  # a correction of the prior: starts at output 0, factor 1
        head = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 1))
        nn.init.zeros_(head[-1].weight)
        nn.init.zeros_(head[-1].bias)
        return head
    if shape != "free":
        raise InputError(f"unknown head shape {shape!r}; known: {', '.join(SHAPES)}")
    if kind == "deepct":
        return nn.Linear(dim, 1)
    return nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 1), nn.ReLU())


def factor(outputs):
    """A BM25-shaped head's multiplier of its prior, ``exp(ln 2 * tanh(o))`` (numpy or torch)."""
    if isinstance(outputs, np.ndarray):
        return np.exp(FACTOR_LOG_BOUND * np.tanh(outputs))
    import torch

    return torch.exp(FACTOR_LOG_BOUND * torch.tanh(outputs))


class TermWeighter:
    """A trained head over its backbone: ``weights(texts)`` -> per text (unique terms, float32 weights)."""

    def __init__(self, path: str | os.PathLike, *, device: str | None = None, backbone: Backbone | None = None,
                 batch_size: int = 32, backend: str | None = None, input: str = DEFAULT_INPUT,
                 threads: int | None = None):
        import torch

        self.path = Path(path)
        card_path = self.path / CARD
        if not card_path.is_file() or not (self.path / HEAD).is_file():
            raise InputError(f"{self.path}: not a trained term weighting model (needs {CARD} and {HEAD}); "
                             f"train one with `weir train deepct|deepimpact`")
        self.card = json.loads(card_path.read_text(encoding="utf-8"))
        self.kind = self.card["kind"]
        self.backbone = backbone or Backbone(self.card["base_model"], device=device, backend=backend,
                                             max_length=int(self.card.get("max_length", MAX_LENGTH)), input=input,
                                             threads=threads)
        self.features = list(self.card.get("features") or [])
        self.shape = self.card.get("shape", "free")
        self.members = int(self.card.get("members", 1))
        self.shrink = (self.card.get("shrink") or {}).get("tau2")
        self.head = make_head(self.kind, self.backbone.dim + len(self.features), self.shape, self.members,
                              self.shrink)
        self.head.load_state_dict(torch.load(self.path / HEAD, map_location="cpu", weights_only=True))
        self.head.eval()
        self.batch_size = batch_size

    def card_sha256(self) -> str:
        return sha256_file(self.path / CARD)

    @property
    def needs_statistics(self) -> bool:
        """Whether the weights need the collection's term statistics (lexical features, or a BM25-shaped prior)."""
        return bool(self.features) or self.shape == "bm25"

    def weigh(self, vectors: np.ndarray, stats: TermStatistics | None, i: int, doc_terms: Sequence[str]) -> np.ndarray:
        """The weights of document ``i``'s terms from their vectors and, where the head needs them, the statistics of
        the collection the document is indexed in."""
        if self.needs_statistics and stats is None:
            raise InputError(f"{self.path}: this head needs the collection's term statistics")
        features = stats.features(self.features, i, doc_terms) if self.features else None
        prior = stats.prior(self.kind, i, doc_terms) if self.shape == "bm25" else None
        return self.apply(vectors, features, prior)

    def search_parameters(self) -> dict:
        """How the index this head writes is searched: BM25-shaped DeepCT with k1 9, b 0.4; the published DeepCT with
        k1 10, b 0.9; DeepImpact by impact sums."""
        if self.kind == "deepct":
            return {"k1": DEEPCT_RESOLUTION * BM25_K1, "b": BM25_B} if self.shape == "bm25" else {"k1": 10.0, "b": 0.9}
        return {}

    def describe(self) -> dict:
        return {"model": str(self.path), "kind": self.kind, "shape": self.shape, "members": self.members,
                "shrink": self.shrink,
                "card_sha256": self.card_sha256(),
                "head_sha256": sha256_file(self.path / HEAD), "base_model": self.card["base_model"],
                "max_length": self.backbone.max_length, "device": self.backbone.device,
                "backend": self.backbone.backend}

    def apply(self, vectors: np.ndarray, features: np.ndarray | None = None,
              prior: np.ndarray | None = None) -> np.ndarray:
        """Weights for term vectors (plus the card's lexical ``features`` columns, when it has any): the head's
        outputs, or for a BM25-shaped head its ``prior`` times the learned factor."""
        import torch

        if len(vectors) == 0:
            return np.zeros(0, dtype=np.float32)
        x = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.features:
            if features is None:
                raise InputError(f"{self.path}: this head needs the term features {self.features}")
            x = np.concatenate([x, features], axis=1)
        with torch.inference_mode():
            out = self.head(torch.from_numpy(x)).squeeze(-1).numpy()
        if self.shape != "bm25":
            return out
        if prior is None:
            raise InputError(f"{self.path}: a BM25-shaped head needs the prior weights of the terms")
        return (np.asarray(prior, dtype=np.float64) * factor(out.astype(np.float64))).astype(np.float32)

    def weights(self, texts: Sequence[str], stats: TermStatistics | None = None) -> list[tuple[list[str], np.ndarray]]:
        """Per text: (unique terms, weights). A head with features or a prior takes ``stats`` of the collection
        (default: the statistics of ``texts`` themselves)."""
        if self.needs_statistics and stats is None:
            stats = TermStatistics(texts)
        return [(terms, self.weigh(vecs, stats, i, terms))
                for i, (terms, vecs) in enumerate(self.backbone.term_vectors(texts, self.batch_size))]


def save(path: str | os.PathLike, head, card: dict) -> Path:
    import torch

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()}, path / HEAD)
    write_card(path, {**card, "head_sha256": sha256_file(path / HEAD)}, CARD)
    return path


def weigh_many(models: Iterable[TermWeighter], texts: Sequence[str]) -> list[list[tuple[list[str], np.ndarray]]]:
    """Weights of ``texts`` under several heads sharing one backbone: one encoder pass for all (statistics, where a
    head needs them, of ``texts`` themselves)."""
    models = list(models)
    vecs = models[0].backbone.term_vectors(texts, models[0].batch_size)
    stats = TermStatistics(texts) if any(m.needs_statistics for m in models) else None
    return [[(terms, m.weigh(v, stats, i, terms)) for i, (terms, v) in enumerate(vecs)] for m in models]
