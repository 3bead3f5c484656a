"""BM25 over the Lucene index: Anserini's BM25, analyzer and tie-breaking, identical hits to pyserini's."""

from __future__ import annotations

from collections.abc import Sequence

from ranker.base import Retriever
from ranker.index import Index
from ranker.lucene_search import LuceneBM25Searcher
from weir.types import Hit, Query, Run


class BM25(Retriever):
    """Multithreaded batch BM25 search. Defaults k1=0.9, b=0.4 (Anserini's, and the published BEIR figures')."""

    def __init__(self, index: Index, *, k1: float = 0.9, b: float = 0.4, threads: int | None = None,
                 component: str = "bm25", name: str = "bm25"):
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1 (got k1={k1}, b={b})")
        self.searcher = LuceneBM25Searcher(index.component_path(component), k1=k1, b=b, threads=threads)
        self.k1, self.b = k1, b
        self.name = name

    def describe(self) -> dict:
        return {**super().describe(), "k1": self.k1, "b": self.b}

    def retrieve(self, queries: Sequence[Query], k: int) -> Run:
        results = self.searcher.search_many([q.text for q in queries], k)
        name = self.name
        return Run({q.id: [Hit(docid, score, rank, {name: score}) for rank, (docid, score) in enumerate(hits, start=1)]
                    for q, hits in zip(queries, results)})

