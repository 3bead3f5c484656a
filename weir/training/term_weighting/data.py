"""A source of a head's training, read (:class:`WeightingData`): its documents and cached term vectors, the head's
inputs and priors by row, the training items (judged queries, or pseudo-queries made from the collection) with their
BM25 hard negatives, the validation queries, and the rows of a training step's documents."""

from __future__ import annotations

import contextlib
import random
import re
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from weir.indexer.collections import Collection
from weir.indexer.weighting.cache import cached_term_vectors
from weir.indexer.weighting.backbone import Backbone
from weir.indexer.weighting.model import DEEPCT_RESOLUTION, TermStatistics, factor
from weir.indexer.weighting.terms import counts_query_terms, unique_terms
from weir.indexer.weighting.terms import terms as text_terms
from weir.evaluation.measures import evaluate
from weir.training.common import TrainingSet
from weir.training.term_weighting.validation import ScoreMatrix, deepct_doc_term
from weir.core.trec import read_qrels, read_topics
from weir.core.types import Hit, InputError, Run

if TYPE_CHECKING:
    from weir.training.term_weighting.config import TrainConfig


@dataclass
class Item:
    """A training query: its text, its positive documents, and for a pseudo-query the positive's terms, frequencies
    and length once the query's own words are taken out of it."""

    qid: str
    text: str
    positives: set[str]
    rest: tuple[list[str], np.ndarray, int] | None = None


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def pseudo_items(docs, n: int, seed: int) -> list[Item]:
    """Pseudo-queries of a collection: title -> the passage without it; a held-out sentence (of four words or more,
    in a passage of two sentences or more) -> the rest of the passage. At most ``n``, seeded."""
    rng = random.Random(seed)
    out = []
    for d in docs:
        if d.title.strip() and d.text.strip():
            out.append((d.title, d, d.text))
        sentences = [s for s in _SENTENCE.split(d.text) if s.strip()]
        long = [i for i, s in enumerate(sentences) if len(s.split()) >= 4]
        if len(sentences) >= 2 and long:
            j = rng.choice(long)
            rest = " ".join(s for i, s in enumerate(sentences) if i != j)
            out.append((sentences[j], d, f"{d.title} {rest}" if d.title else rest))
    rng.shuffle(out)
    items = []
    for k, (query, d, rest) in enumerate(out[:n]):
        counts = Counter(text_terms(rest))
        if not counts or not unique_terms(query):
            continue
        kept = list(counts)
        items.append(Item(f"pseudo:{k}", query, {d.id}, (kept, np.array([counts[t] for t in kept], float),
                                                         sum(counts.values()))))
    return items


@contextlib.contextmanager
def bm25_searcher(collection: Collection, index: str | None, log):
    """weir's BM25 over the collection (hard negatives, the BM25 half of ``deepimpact+bm25``): ``index`` (an index
    directory or its bm25 component), else one built aside and removed after."""
    from weir.indexer.lucene import build_bm25
    from weir.ranker.retrievers.lucene import LuceneBM25Searcher

    with tempfile.TemporaryDirectory(prefix="weir-train-bm25-") as tmp:
        path = Path(index) if index else Path(tmp) / "bm25"
        if not index:
            log(f"{collection.name}: building a BM25 index of the collection")
            build_bm25(collection.corpus(skip_empty=True), path)
        elif (path / "manifest.json").is_file():
            path = path / "bm25"
        searcher = LuceneBM25Searcher(path)
        try:
            yield searcher
        finally:
            searcher.close()


class WeightingData:
    """One source of a head's training, read: a training set (``judged``) or a self-supervised collection; its
    documents, cached term vectors, statistics, the head's inputs and priors by row, training items with their BM25
    negatives, and the validation queries with the BM25 run ``deepimpact+bm25`` fuses."""

    def __init__(self, judged: TrainingSet | None, collection: str, weight: float, config: TrainConfig,
                 backbone: Backbone, log, bm25_index: str | None = None):
        self.judged, self.weight = judged, weight
        self.coll = Collection.open(collection)
        self.name = self.coll.name + ("" if judged else " (self-supervised)")
        self.docs = list(self.coll.corpus(skip_empty=True))  # an empty document has no term to weigh
        self.tv = tv = cached_term_vectors(backbone, self.docs, log=log)
        self.stats = TermStatistics(d.contents for d in self.docs)
        self.sm = ScoreMatrix(tv)
        rng = random.Random(config.seed)
        if judged is not None:
            min_rel = judged.min_rel if judged.min_rel is not None else config.min_rel
            topics = {q.id: q.text for q in read_topics(judged.topics)}
            self.qrels = {q: {d: r for d, r in rels.items() if r >= min_rel and d in tv.index}
                          for q, rels in read_qrels(judged.qrels).items() if q in topics}
            qids = sorted(q for q in topics if self.qrels.get(q))
            rng.shuffle(qids)
            items = [Item(q, topics[q], set(self.qrels[q])) for q in qids[:config.max_queries]]
        else:
            items = pseudo_items(self.docs, config.pseudo_queries, config.seed)
            self.qrels = {i.qid: {d: 1 for d in i.positives} for i in items}
        if len(items) < 2:
            raise InputError(f"{self.name}: fewer than 2 training queries with a relevant document")
        n_val = max(1, int(round(len(items) * config.val_fraction))) if config.val_fraction > 0 else 0
        self.val, self.items = items[:n_val], items[n_val:]
        if config.titles and judged is not None:
            self.items += [Item(f"title:{d.id}", d.title, {d.id}) for d in self.docs if d.title.strip()]
        self.term_rows = [dict(zip(terms, range(len(terms)))) for terms in tv.terms]
        self.inputs = self._inputs(config)
        self.prior = self._prior(config) if config.shape == "bm25" else None
        with bm25_searcher(self.coll, bm25_index, log) as bm25:
            found = bm25.search_many([i.text for i in self.items], config.negative_depth + 10)
            self.negatives = [[d for d, _ in hits if d not in item.positives] for item, hits in zip(self.items, found)]
            hits = bm25.search_many([i.text for i in self.val], 100)
        self.bm25_val = Run({i.qid: [Hit(d, s, r, {"bm25": s}) for r, (d, s) in enumerate(h, 1)]
                             for i, h in zip(self.val, hits)}).ranked()
        log(f"{self.name}: {len(self.items)} training and {len(self.val)} validation queries, weight {weight}")

    def share(self, draws: str, validation: bool = False) -> float:
        """How much this source counts among the sources, in drawing training queries or (``validation``) in the mean
        of validation figures: its weight, times its number of those queries with ``draws`` ``queries``."""
        return self.weight * (len(self.val if validation else self.items) if draws == "queries" else 1)

    def prepare_deepct(self) -> None:
        """What the DeepCT ranking loss needs: each row's document frequency, and the mean pseudo-document length at
        factor 1 (10 x the mean length in terms)."""
        self._df_rows = np.array([self.stats.df.get(t, 0) for terms in self.tv.terms for t in terms], dtype=np.float32)
        self.avgdl_pseudo = DEEPCT_RESOLUTION * self.stats.avgdl

    def df_of_rows(self, rows: np.ndarray) -> np.ndarray:
        return self._df_rows[rows]

    def _inputs(self, config: TrainConfig) -> np.ndarray | None:
        if not config.features:
            return None
        return np.concatenate([self.stats.features(config.features, i, t) for i, t in enumerate(self.tv.terms)])

    def _prior(self, config: TrainConfig) -> np.ndarray:
        return np.concatenate([self.stats.prior(config.kind, i, t) for i, t in enumerate(self.tv.terms)]) \
            .astype(np.float32)

    def x(self, rows: np.ndarray):
        """The head's inputs of cached rows (the vector, and lexical features when asked)."""
        import torch

        x = np.asarray(self.tv.data[rows], dtype=np.float32)
        if self.inputs is not None:
            x = np.concatenate([x, self.inputs[rows]], axis=1)
        return torch.from_numpy(x)

    def weights(self, head, shape: str) -> np.ndarray:
        """Every row's weight under ``head``, as the index will have it (before quantization)."""
        import torch

        with torch.inference_mode():
            out = np.concatenate([head(self.x(np.arange(i, min(i + 65536, len(self.tv.data))))).squeeze(-1).numpy()
                                  for i in range(0, len(self.tv.data), 65536)]).astype(np.float64)
        return self.prior * factor(out) if shape == "bm25" else out

    def validate(self, kind: str, weights: np.ndarray, search: dict, shape: str) -> tuple[dict, Run]:
        """nDCG@10 and R@100 of the validation queries, every document scored as the index will score it (the query
        weighted as its retriever weighs it)."""
        doc_term = self.sm.matrix(weights) if kind == "deepimpact" else deepct_doc_term(self.sm, weights, **search)
        run = self.sm.run(doc_term, [i.qid for i in self.val], [i.text for i in self.val], name=kind,
                          counts=counts_query_terms(kind, shape))
        return evaluate(run, {i.qid: self.qrels[i.qid] for i in self.val}, ["nDCG@10", "R@100"]), run

    def group(self, item: Item, negatives: list[str], kind: str, query_terms: dict[str, int], rng) -> list[tuple]:
        """(rows, prior or None) of the positive and the negatives of a step: the rows of the query's terms
        (DeepImpact) or of all the document's terms with a mask of the query's (DeepCT, for its length)."""
        positive = rng.choice(sorted(item.positives))
        out = [self._rows(positive, kind, query_terms, item.rest)]
        for d in negatives:
            out.append(self._rows(d, kind, query_terms, None))
        return out

    def _rows(self, doc: str, kind: str, query_terms: dict[str, int], rest) -> tuple:
        i = self.tv.index[doc]
        rows_of = self.term_rows[i]
        base = self.tv.offsets[i]
        if rest is None:
            terms = self.tv.terms[i] if kind == "deepct" else [t for t in query_terms if t in rows_of]
            rows = np.array([base + rows_of[t] for t in terms], dtype=np.int64)
            prior = self.prior[rows] if self.prior is not None else None
        else:  # the positive of a pseudo-query: the rest of the passage, its own frequencies and length
            kept, tf, length = rest
            tf_of = dict(zip(kept, tf))
            terms = [t for t in (kept if kind == "deepct" else query_terms) if t in rows_of and t in tf_of]
            rows = np.array([base + rows_of[t] for t in terms], dtype=np.int64)
            counts = np.array([tf_of[t] for t in terms], dtype=np.float64)
            if self.prior is None:
                prior = None
            elif kind == "deepimpact":
                prior = self.stats.bm25(i, terms, tf=counts, length=length).astype(np.float32)
            else:
                prior = (counts * DEEPCT_RESOLUTION / 100.0).astype(np.float32)
        if prior is not None and kind == "deepimpact":  # the query's count of each term weighs it, as searched
            prior = prior * np.array([query_terms[t] for t in terms], dtype=np.float32)
        mask = np.array([query_terms.get(t, 0) for t in terms], dtype=np.float32)  # DeepCT: the count, 0 off query
        return rows, prior, mask
