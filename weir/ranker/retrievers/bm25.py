"""BM25 over the Lucene index, scored in process: Anserini's analyzer, Lucene's BM25 and tie-breaking, identical
hits to pyserini's (:mod:`weir.ranker.retrievers.inverted`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from weir.indexer.index_dir import Index
from weir.indexer.shards import CollectionStatistics
from weir.ranker.retrievers.inverted import BM25Scores, InvertedIndex, SparseRetriever
from weir.ranker.retrievers.lucene import EnglishAnalyzer


class BM25(SparseRetriever):
    """Batch BM25 search. Defaults k1=0.9, b=0.4 (Anserini's, and the published BEIR figures'). A query's terms
    are weighted by their count in the query, as Anserini's bag-of-words query does."""

    def __init__(self, index: Index, *, k1: float = 0.9, b: float = 0.4, component: str = "bm25", name: str = "bm25",
                 statistics: CollectionStatistics | None = None):
        """``statistics``: the collection statistics to score with instead of the index's own (a shard scoring as
        the whole shard set, :func:`weir.indexer.shards.global_statistics`)."""
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"BM25 needs k1 >= 0 and 0 <= b <= 1 (got k1={k1}, b={b})")
        self.engine = InvertedIndex.shared(index.postings(component), BM25Scores, k1=k1, b=b, statistics=statistics)
        self.analyzer = EnglishAnalyzer()
        self.k1, self.b = k1, b
        self.name = name

    def weights(self, texts: Sequence[str]) -> list[dict[str, float]]:
        return [dict(Counter(terms)) for terms in self.analyzer.analyze_many(texts)]

    def describe(self) -> dict:
        return {**super().describe(), "k1": self.k1, "b": self.b}
