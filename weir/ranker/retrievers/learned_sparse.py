"""First stages over learned term weights: DeepCT (BM25 over pseudo-documents) and DeepImpact (sum of impacts).

Both indexes hold terms made by :mod:`weir.indexer.weighting.terms` (written ``--pretokenized``); a query goes through the
same function, so what a query asks for is exactly what was indexed. Queries are scored in process over the
postings of the Lucene index (:mod:`weir.ranker.retrievers.inverted`), with the scores and tie-break (score, then docid)
that Lucene gives the same boolean query of term queries:

- ``deepct``: BM25 (default k1=10, b=0.9, the DeepCT paper's) over the pseudo-documents, each query term once per
  occurrence in the query (Anserini's bag of words);
- ``deepimpact``: Anserini's ``ImpactSimilarity`` (score = stored term frequency x query weight) with weight 1 per
  unique query term, so a document's score is the sum of the quantized impacts of its terms that the query has; a
  BM25-shaped head's queries weigh each term by its count instead, as BM25 does (its untrained head is then BM25).
"""

from __future__ import annotations

from collections.abc import Sequence

from weir.indexer.index_dir import Index
from weir.indexer.shards import CollectionStatistics
from weir.indexer.weighting.terms import counts_query_terms, query_weights
from weir.ranker.retrievers.inverted import BM25Scores, ImpactScores, InvertedIndex, SparseRetriever, TermScores


def deepct_query(text: str) -> dict[str, float]:
    """Each term weighted by its count in the query (Anserini's bag of words)."""
    return query_weights(text, counts=True)


def impact_query(text: str, counts: bool = False) -> dict[str, float]:
    """Integer weights, as impact search needs: 1 per unique query term (the published DeepImpact), or each term's
    count in the query (a BM25-shaped head, whose untrained form is then exactly BM25)."""
    return query_weights(text, counts)


class _TermRetriever(SparseRetriever):
    """A first stage over the pretokenized Lucene index of one learned component."""

    component = ""

    def __init__(self, index: Index, scores: type[TermScores], *, name: str | None = None, **parameters):
        self.engine = InvertedIndex.shared(index.postings(self.component), scores, **parameters)
        info = index.component(self.component)
        self.model_card = info.get("model")
        self.parameters = info.get("parameters", {})
        self.name = name or self.component

    def query(self, text: str) -> dict[str, float]:
        raise NotImplementedError

    def weights(self, texts: Sequence[str]) -> list[dict[str, float]]:
        return [self.query(t) for t in texts]


class DeepCTRetriever(_TermRetriever):
    """BM25 over DeepCT pseudo-documents (tf = round(100 w)), with the k1 and b the index records for its head (k1 9,
    b 0.4 for a BM25-shaped head; the DeepCT paper's k1 10, b 0.9 for the published one); ``k1``/``b`` override."""

    component = "deepct"

    def __init__(self, index: Index, *, k1: float | None = None, b: float | None = None,
                 statistics: CollectionStatistics | None = None):
        """``statistics``: the collection statistics to score with instead of the index's own (a shard scoring as
        the whole shard set, :func:`weir.indexer.shards.global_statistics` of the ``deepct`` component)."""
        search = index.component(self.component).get("parameters", {}).get("search") or {}
        k1 = float(search.get("k1", 10.0)) if k1 is None else k1
        b = float(search.get("b", 0.9)) if b is None else b
        super().__init__(index, BM25Scores, k1=k1, b=b, statistics=statistics)
        self.k1, self.b = k1, b

    def describe(self) -> dict:
        return {**super().describe(), "k1": self.k1, "b": self.b}

    def query(self, text: str) -> dict[str, float]:
        return deepct_query(text)


class ImpactRetriever(_TermRetriever):
    """Sum of the quantized impacts of the document terms the query has (weight 1 per unique query term; a BM25-shaped
    head's: each term's count in the query)."""

    component = "deepimpact"

    def __init__(self, index: Index):
        super().__init__(index, ImpactScores)
        self.counts = counts_query_terms("deepimpact", (self.model_card or {}).get("shape"))

    def describe(self) -> dict:
        return {**super().describe(), "quantization": self.parameters.get("quantization"),
                "query_weights": "count" if self.counts else "unique"}

    def query(self, text: str) -> dict[str, float]:
        return impact_query(text, self.counts)
