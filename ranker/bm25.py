"""BM25 over the Lucene index (Anserini's BM25 with its default English analyzer, through pyserini)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from ranker.base import Retriever
from ranker.index import Index
from weir.types import Hit, Query, Run


class BM25(Retriever):
    """Multithreaded batch BM25 search. Defaults k1=0.9, b=0.4 (Anserini's, and the published BEIR figures')."""

    def __init__(self, index: Index, *, k1: float = 0.9, b: float = 0.4, threads: int | None = None,
                 component: str = "bm25", name: str = "bm25"):
        from weir import jvm

        jvm.ensure()
        from pyserini.pyclass import JArrayList
        from pyserini.search.lucene import LuceneSearcher

        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1 (got k1={k1}, b={b})")
        self._JArrayList = JArrayList
        self.searcher = LuceneSearcher(str(index.component_path(component)))  # own searcher: similarity is per searcher
        self.searcher.set_bm25(float(k1), float(b))
        self.k1, self.b = k1, b
        self.threads = threads or max(1, os.cpu_count() or 1)
        self.name = name

    def describe(self) -> dict:
        return {**super().describe(), "k1": self.k1, "b": self.b}

    def retrieve(self, queries: Sequence[Query], k: int) -> Run:
        run = Run({q.id: [] for q in queries})
        if not queries:
            return run
        texts, qids = self._JArrayList(), self._JArrayList()
        for q in queries:
            texts.add(q.text)
            qids.add(q.id)
        if len(queries) == 1:
            results = {queries[0].id: self.searcher.object.search(queries[0].text, int(k))}
        else:
            results = {e.getKey(): e.getValue()
                       for e in self.searcher.object.batch_search(texts, qids, int(k), int(self.threads)).entrySet().toArray()}
        name = self.name
        for qid, hits in results.items():
            run[qid] = [Hit(h.docid, h.score, rank, {name: h.score}) for rank, h in enumerate(hits, start=1)]
        return run
