"""Learning-to-rank features of (query, candidate) pairs, computed in batches over a run.

For the top ``depth`` hits of each query (:class:`FeatureExtractor`), one row of :data:`FEATURES`:

- ``bm25``: Lucene BM25 of the full text (title + text, the index's ``contents`` field, k1=0.9, b=0.4), exactly the
  score the BM25 first stage gives, from one Lucene query per query restricted to its candidates (a ``FILTER`` on
  their ids; a candidate without a query term gets 0); ``bm25_norm``: divided by the query's best candidate's;
- ``title_bm25``: BM25 of the title alone over the analyzed title tokens, with the collection's idf and the mean
  title length of the query's candidates as the average length (0 without a title); ``title_coverage``;
- ``dense_cos``: cosine of the query embedding and the passage vector stored in the index's ``dense`` component
  (passages are never re-encoded; NaN without a dense component or for a document not in it); ``dense_cos_gap``:
  minus the query's best candidate's cosine;
- lengths: ``query_len`` (analyzed query terms), ``doc_len`` (analyzed contents terms), ``title_len``;
- term statistics over the unique analyzed query terms: ``coverage`` (share present in the document),
  ``idf_coverage`` (idf-weighted share), ``matched_tf`` (query-term occurrences / doc_len), ``idf_sum``,
  ``idf_max``, ``idf_mean`` (of the query), ``matched_idf_max``;
- proximity: ``min_span`` (matched distinct terms / the shortest token window containing them all; 0 when fewer
  than two match), ``bigram_match`` (share of the query's adjacent term pairs found adjacent, in order);
- first stage: ``first_score``, ``first_score_norm`` (min-max within the query), ``first_rank`` (the incoming
  hit's), and the scores of earlier stages from ``Hit.stage_scores`` when a stage gave them (NaN otherwise: LightGBM
  treats NaN as missing): the learned sparse ``deepimpact`` / ``deepct``, and ``attention`` (the attention reranker's
  score, e.g. in ``bm25>>attention>>ltr``) with ``attention_norm`` (min-max within the query).

Terms come from Anserini's analyzer (the index's: English, Porter stemming, stopwords removed); idf is Lucene's
BM25 idf ``ln(1 + (N - df + 0.5) / (df + 0.5))`` over the ``contents`` field. Analyzed documents are cached as
token ids, and the text features of a query's candidates come from one compiled pass over them
(:mod:`weir.ranker.rerankers.text_features`: the same floats as the definitions above, 3.6x faster, the GIL
released).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from weir.core import bm25
from weir.indexer.index_dir import Index
from weir.core.types import Hit, Query, Run
from weir.ranker.rerankers.lru import LruCache
from weir.ranker.rerankers.text_features import TEXT_FEATURES, Tokens, text_features

FEATURES = (
    "bm25", "bm25_norm", "title_bm25", "title_coverage", "dense_cos", "dense_cos_gap",
    "query_len", "doc_len", "title_len",
    "coverage", "idf_coverage", "matched_tf", "idf_sum", "idf_max", "idf_mean", "matched_idf_max",
    "min_span", "bigram_match",
    "first_score", "first_score_norm", "first_rank", "deepimpact", "deepct", "attention", "attention_norm",
)
STAGE_SCORES = ("deepimpact", "deepct", "attention")  # earlier stages' scores taken from Hit.stage_scores
# features whose direction is known, for monotone constraints: +1 where more means more relevant, -1 where less does
# (the incoming rank); lengths and the query's own idf statistics have no direction
DIRECTION = {name: 1 for name in ("bm25", "bm25_norm", "title_bm25", "title_coverage", "dense_cos", "dense_cos_gap",
                                   "coverage", "idf_coverage", "matched_tf", "min_span", "bigram_match",
                                   "first_score", "first_score_norm", "deepimpact", "deepct", "attention",
                                   "attention_norm")} | {"first_rank": -1}
K1, B = bm25.K1, bm25.B


def bm25_idf(n_docs: int, df: int) -> float:
    """Lucene's BM25 idf of one term (:func:`weir.core.bm25.idf` over Python floats)."""
    return bm25.idf(n_docs, df, log=math.log)


class LuceneStats:
    """Anserini's analyzer, ``contents`` term statistics and candidate-restricted BM25 over one BM25 index: the
    statistics come from the index's postings and BM25 is scored in process, exactly as Lucene scores it
    (:mod:`weir.ranker.retrievers.inverted`); only analysis runs in Java."""

    def __init__(self, index: Index, *, k1: float = K1, b: float = B, component: str = "bm25"):
        from weir.ranker.retrievers.inverted import BM25Scores, InvertedIndex
        from weir.ranker.retrievers.lucene import EnglishAnalyzer

        postings = index.postings(component)
        self.engine = InvertedIndex.shared(postings, BM25Scores, k1=k1, b=b)
        self.analyzer = EnglishAnalyzer()
        self.n_docs = postings.live_docs  # Lucene's numDocs
        self.terms, self._doc_freqs = postings.terms, postings.doc_freqs

    def analyze(self, text: str) -> list[str]:
        return self.analyzer.analyze(text)

    def idf(self, term: str) -> float:
        return self.idf_of(self.terms.get(term))

    def idf_of(self, ordinal: int | None) -> float:
        """The idf of the term at ``ordinal`` of the postings' terms (None or outside them: a term they lack, df 0)."""
        held = ordinal is not None and 0 <= ordinal < len(self.terms)
        return bm25_idf(self.n_docs, int(self._doc_freqs[ordinal]) if held else 0)

    def bm25(self, text: str, doc_ids: Sequence[str]) -> dict[str, float]:
        """BM25 of ``text`` for each of ``doc_ids`` (0 for a document without a query term)."""
        terms = self.analyze(text) if doc_ids and text.strip() else []
        if not terms:
            return dict.fromkeys(doc_ids, 0.0)
        return dict(zip(doc_ids, self.engine.score(Counter(terms), doc_ids)))


class FeatureExtractor:
    """Features of the top ``depth`` candidates of every query of a run, as one float32 matrix."""

    names = FEATURES
    _text_cols = [FEATURES.index(n) for n in TEXT_FEATURES]

    def __init__(self, index: Index, *, dense_component: str = "dense", device: str | None = None,
                 cache_size: int = 200_000, backend: str | None = None):
        self.index = index
        self.lucene = LuceneStats(index)
        self.dense = None
        if dense_component in index.components:
            from weir.indexer.dense import open_dense

            self.dense = open_dense(index, dense_component)
            self.encoder = self.dense.query_encoder(device=device, backend=backend)
        self.tokens = Tokens(self.lucene.terms)
        self._docs = LruCache(cache_size)  # (contents token ids, title token ids) per document

    def describe(self) -> dict:
        return {"features": list(self.names), "bm25": {"k1": K1, "b": B},
                "dense": self.dense.encoder_settings.get("model") if self.dense else None}

    def _analyzed(self, doc_ids: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """(contents token ids, title token ids) of each document (:class:`Tokens`), analyzed once and cached."""
        def analyze(missing: list[str]) -> list[tuple[np.ndarray, np.ndarray]]:
            docs = self.index.documents(missing)
            none = np.zeros(0, dtype=np.int32)
            return [(self.tokens.of_document(self.lucene.analyze(docs[d].contents)),
                     self.tokens.of_document(self.lucene.analyze(docs[d].title))) if d in docs else (none, none)
                    for d in missing]

        return dict(zip(doc_ids, self._docs.get_many(doc_ids, analyze)))

    def _text_features(self, q_terms: list[str], docs: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        """:data:`~weir.ranker.rerankers.text_features.TEXT_FEATURES` of one query's candidates (their token ids)."""
        unique = list(dict.fromkeys(q_terms))
        at = {t: j for j, t in enumerate(unique)}
        seq = np.asarray([at[t] for t in q_terms], dtype=np.int64)
        ids = self.tokens.of_query(unique)  # each term looked up once, for its token id and its idf
        idf = np.asarray([self.lucene.idf_of(int(i)) for i in ids], dtype=np.float64)
        contents, titles = [d[0] for d in docs], [d[1] for d in docs]
        title_lens = [len(t) for t in titles]
        avg_title = sum(title_lens) / len(title_lens) if any(title_lens) else 1.0
        return text_features(_joined(contents), _bounds(contents), _joined(titles), _bounds(titles),
                             ids, idf, seq, avg_title, K1, B)

    def _cosines(self, queries: Sequence[Query], candidates: dict[str, list[Hit]]) -> dict[str, np.ndarray]:
        if self.dense is None:
            return {q.id: np.full(len(candidates[q.id]), np.nan, dtype=np.float32) for q in queries}
        qvecs = self.encoder.encode_queries([q.text for q in queries])
        vectors = self.dense.vectors
        out = {}
        for q, qv in zip(queries, qvecs):
            rows = self.dense.rows([h.doc_id for h in candidates[q.id]])
            cos = np.full(len(rows), np.nan, dtype=np.float32)
            present = np.flatnonzero(rows >= 0)
            if len(present):
                order = np.argsort(rows[present])  # a memory-mapped array is read fastest in row order
                vecs = np.asarray(vectors[rows[present][order]], dtype=np.float32)
                cos[present[order]] = vecs @ qv
            out[q.id] = cos
        return out

    def extract(self, queries: Sequence[Query], run: Run, depth: int) -> tuple[np.ndarray, list[tuple[str, int]]]:
        """Rows for the top ``depth`` hits of each query (queries in order, hits in run order): the matrix and, per
        row, (query id, position of the hit in the query's list)."""
        candidates = {q.id: run.top(q.id, depth) for q in queries}
        docs = self._analyzed([h.doc_id for hits in candidates.values() for h in hits])
        cosines = self._cosines(queries, candidates)
        col = {n: i for i, n in enumerate(self.names)}
        rows: list[tuple[str, int]] = []
        blocks = []
        for q in queries:
            hits = candidates[q.id]
            if not hits:
                continue
            q_terms = self.lucene.analyze(q.text)
            bm25_scores = self.lucene.bm25(q.text, [h.doc_id for h in hits])
            X = np.full((len(hits), len(self.names)), np.nan, dtype=np.float32)
            X[:, col["query_len"]] = float(len(q_terms))
            X[:, self._text_cols] = self._text_features(q_terms, [docs[h.doc_id] for h in hits])
            for i, h in enumerate(hits):
                X[i, col["bm25"]] = bm25_scores[h.doc_id]
                X[i, col["first_score"]] = h.score
                X[i, col["first_rank"]] = h.rank or i + 1
                for name in STAGE_SCORES:
                    if name in h.stage_scores:
                        X[i, col[name]] = h.stage_scores[name]
                rows.append((q.id, i))
            top_bm25 = X[:, col["bm25"]].max()
            X[:, col["bm25_norm"]] = X[:, col["bm25"]] / top_bm25 if top_bm25 > 0 else 0.0
            X[:, col["dense_cos"]] = cosines[q.id]
            if not np.isnan(cosines[q.id]).all():
                X[:, col["dense_cos_gap"]] = cosines[q.id] - np.nanmax(cosines[q.id])
            first = X[:, col["first_score"]]
            span = first.max() - first.min()
            X[:, col["first_score_norm"]] = (first - first.min()) / span if span > 0 else 1.0
            attention = X[:, col["attention"]]
            if not np.isnan(attention).all():
                span = np.nanmax(attention) - np.nanmin(attention)
                X[:, col["attention_norm"]] = (attention - np.nanmin(attention)) / span if span > 0 else 1.0
            blocks.append(X)
        matrix = np.concatenate(blocks) if blocks else np.zeros((0, len(self.names)), dtype=np.float32)
        return matrix, rows


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int32)


def _bounds(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int64)
