"""BM25 over the Lucene index: Anserini's BM25, analyzer and tie-breaking, identical hits to pyserini's."""

from __future__ import annotations

from indexer.index_dir import Index
from ranker.retrievers.lucene import LuceneBM25Searcher, LuceneRetriever


class BM25(LuceneRetriever):
    """Batch BM25 search. Defaults k1=0.9, b=0.4 (Anserini's, and the published BEIR figures')."""

    def __init__(self, index: Index, *, k1: float = 0.9, b: float = 0.4, component: str = "bm25", name: str = "bm25"):
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1 (got k1={k1}, b={b})")
        self.searcher = LuceneBM25Searcher(index.component_path(component), k1=k1, b=b)
        self.k1, self.b = k1, b
        self.name = name

    def describe(self) -> dict:
        return {**super().describe(), "k1": self.k1, "b": self.b}
