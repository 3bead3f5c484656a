"""Validation as the index will score: every document of a source scored for the validation queries (sum of impacts
of the matching terms; BM25 over ``round(100 w)`` for DeepCT), before quantization."""

from __future__ import annotations

import numpy as np

from weir.core import bm25
from weir.indexer.weighting.terms import query_weights
from weir.core.types import Hit, Run


class ScoreMatrix:
    """Doc x term sparse structure of the cached vectors, for scoring every document for a set of queries."""

    def __init__(self, tv):
        import scipy.sparse as sp

        self.vocab: dict[str, int] = {}
        cols = [self.vocab.setdefault(t, len(self.vocab)) for terms in tv.terms for t in terms]
        rows = np.repeat(np.arange(len(tv.terms)), np.diff(tv.offsets))
        self.rows, self.cols = rows, np.asarray(cols, dtype=np.int64)
        self.shape = (len(tv.terms), len(self.vocab))
        self.docids = tv.docids
        self._sp = sp

    def matrix(self, values: np.ndarray):
        return self._sp.csr_matrix((values, (self.rows, self.cols)), shape=self.shape)

    def query_matrix(self, texts: list[str], counts: bool = False):
        """Queries x terms: each term's count in the query, or 1 per unique term (as the index searches them)."""
        qr, qc, qv = [], [], []
        for i, text in enumerate(texts):
            for t, w in query_weights(text, counts).items():
                if t in self.vocab:
                    qr.append(i)
                    qc.append(self.vocab[t])
                    qv.append(w)
        return self._sp.csr_matrix((np.asarray(qv, dtype=np.float64), (qr, qc)), shape=(len(texts), self.shape[1]))

    def run(self, doc_term, qids: list[str], texts: list[str], k: int = 1000, name: str = "score",
            counts: bool = False) -> Run:
        scores = (doc_term @ self.query_matrix(texts, counts).T).T.toarray()
        out = Run()
        for i, qid in enumerate(qids):
            s = scores[i]
            top = np.argpartition(-s, min(k, len(s) - 1))[:k]
            top = top[s[top] > 0]
            out[qid] = [Hit(self.docids[j], float(s[j]), 0, {name: float(s[j])}) for j in top]
        return out.ranked()


def deepct_doc_term(sm: ScoreMatrix, weights: np.ndarray, k1: float = 10.0, b: float = 0.9):
    """BM25 (Lucene's formula) of every (document, term) of DeepCT pseudo-documents with tf = round(100 w)."""
    tf = np.maximum(np.rint(weights * 100), 0)
    dl = np.bincount(sm.rows, weights=tf, minlength=sm.shape[0])
    avgdl = dl.mean() if dl.mean() > 0 else 1.0
    df = np.bincount(sm.cols, weights=(tf >= 1).astype(float), minlength=sm.shape[1])
    idf = bm25.idf(sm.shape[0], df)
    norm = k1 * (1 - b + b * dl[sm.rows] / avgdl)
    values = np.where(tf >= 1, idf[sm.cols] * tf / (tf + norm), 0.0)
    return sm.matrix(values)
