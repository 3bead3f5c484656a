"""First stages over learned term weights: DeepCT (BM25 over pseudo-documents) and DeepImpact (sum of impacts).

Both indexes hold terms made by :mod:`indexer.weighting.terms` (written ``--pretokenized``); a query goes through the
same function, so what a query asks for is exactly what was indexed. Queries are Lucene boolean queries of term
queries searched directly through pyjnius (as :mod:`ranker.lucene_search` does for BM25; no stored documents are
loaded), with Anserini's tie-break (score, then docid):

- ``deepct``: BM25 (default k1=10, b=0.9, the DeepCT paper's) over the pseudo-documents, each query term once per
  occurrence in the query (Anserini's bag of words);
- ``deepimpact``: Anserini's ``ImpactSimilarity`` (score = stored term frequency x query weight) with weight 1 per
  unique query term, so a document's score is the sum of the quantized impacts of its terms that the query has.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence

from indexer.weighting.terms import terms as text_terms
from ranker.base import Retriever
from ranker.index import Index
from ranker.lucene_search import LuceneSearcher, _java
from weir.types import Hit, Query, Run


class LuceneTermSearcher(LuceneSearcher):
    """Top-k search of weighted term queries ({term: weight}) over a pretokenized Lucene index (thread-safe)."""

    def __init__(self, path: str | os.PathLike, similarity, *, field: str = "contents", threads: int | None = None):
        autoclass, _ = _java()
        super().__init__(path, similarity, field=field, threads=threads)
        self._builder = autoclass("org.apache.lucene.search.BooleanQuery$Builder")
        self._should = autoclass("org.apache.lucene.search.BooleanClause$Occur").SHOULD
        self._term_query = autoclass("org.apache.lucene.search.TermQuery")
        self._term = autoclass("org.apache.lucene.index.Term")
        self._boost = autoclass("org.apache.lucene.search.BoostQuery")

    def lucene_query(self, weights: dict[str, float]):
        if not weights:
            return None
        builder = self._builder()
        for term, w in weights.items():
            q = self._term_query(self._term(self.field, term))
            builder.add(q if w == 1 else self._boost(q, float(w)), self._should)
        return builder.build()


def deepct_query(text: str) -> dict[str, float]:
    """Each term weighted by its count in the query (Anserini's bag of words)."""
    return dict(Counter(text_terms(text)))


def impact_query(text: str) -> dict[str, float]:
    """Weight 1 (an integer, as impact search needs) per unique query term."""
    return dict.fromkeys(text_terms(text), 1)


class _TermRetriever(Retriever):
    component = ""

    def __init__(self, index: Index, similarity, *, threads: int | None = None, name: str | None = None):
        self.searcher = LuceneTermSearcher(index.component_path(self.component), similarity, threads=threads)
        info = index.manifest["components"][self.component]
        self.model_card = info.get("model")
        self.parameters = info.get("parameters", {})
        self.name = name or self.component

    def query(self, text: str) -> dict[str, float]:
        raise NotImplementedError

    def retrieve(self, queries: Sequence[Query], k: int) -> Run:
        results = self.searcher.search_many([self.query(q.text) for q in queries], k)
        name = self.name
        return Run({q.id: [Hit(d, s, rank, {name: s}) for rank, (d, s) in enumerate(hits, start=1)]
                    for q, hits in zip(queries, results)})


class DeepCTRetriever(_TermRetriever):
    """BM25 over DeepCT pseudo-documents (tf = round(100 w)); default k1=10, b=0.9."""

    component = "deepct"

    def __init__(self, index: Index, *, k1: float = 10.0, b: float = 0.9, threads: int | None = None):
        autoclass, _ = _java()
        super().__init__(index, autoclass("org.apache.lucene.search.similarities.BM25Similarity")(float(k1), float(b)),
                         threads=threads)
        self.k1, self.b = k1, b

    def describe(self) -> dict:
        return {**super().describe(), "k1": self.k1, "b": self.b}

    def query(self, text: str) -> dict[str, float]:
        return deepct_query(text)


class ImpactRetriever(_TermRetriever):
    """Sum of the quantized impacts of the document terms the query has (weight 1 per unique query term)."""

    component = "deepimpact"

    def __init__(self, index: Index, *, threads: int | None = None):
        autoclass, _ = _java()
        super().__init__(index, autoclass("io.anserini.search.similarity.ImpactSimilarity")(), threads=threads)

    def describe(self) -> dict:
        return {**super().describe(), "quantization": self.parameters.get("quantization")}

    def query(self, text: str) -> dict[str, float]:
        return impact_query(text)


DEFAULT_FUSION = {"method": "minmax", "weights": [0.5, 0.5], "depth": 1000}


def fusion_settings(index: Index, options: dict) -> dict:
    """How ``deepimpact+bm25`` interpolates: ``fusion`` / ``fusion_weights`` options, else the ``fusion`` entry of
    the DeepImpact model card in the index manifest (chosen on training queries), else min-max 0.5 / 0.5."""
    from ranker.tuning import parse_weights

    card = ((index.manifest["components"].get("deepimpact") or {}).get("model") or {}).get("card") or {}
    tuned = card.get("fusion") or {}
    method = options.get("fusion") or tuned.get("method") or DEFAULT_FUSION["method"]
    weights = parse_weights(options.get("fusion_weights"), ["deepimpact", "bm25"])
    if weights is None and method == tuned.get("method"):
        weights = tuned.get("weights")
    return {"method": method, "weights": weights or DEFAULT_FUSION["weights"],
            "depth": int(options.get("depth_per_stage") or DEFAULT_FUSION["depth"]), "tuned": tuned or None}
