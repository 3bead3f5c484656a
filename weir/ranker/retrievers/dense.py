"""Dense first-stage retrieval: queries encoded in a batch (:mod:`weir.indexer.encoder`), searched in the faiss index of
an index directory's ``dense`` component (:func:`weir.indexer.dense.open_dense`), faiss rows mapped back to document ids.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from weir.indexer.dense import open_dense
from weir.indexer.index_dir import Index
from weir.ranker.stage import Retriever
from weir.core.hits import Ranked
from weir.core.types import Query, Run


class DenseRetriever(Retriever):
    """Encode the queries with the model the index was built with, search faiss, map rows to docids.

    ``model`` overrides the encoder recorded in the manifest (it must produce the same space: e.g. the same model at
    another path); ``ef_search`` / ``nprobe`` override the stored HNSW / IVF search parameters."""

    def __init__(self, index: Index, *, component: str = "dense", model: str | None = None, device: str | None = None,
                 ef_search: int | None = None, nprobe: int | None = None, name: str = "dense",
                 backend: str | None = None):
        self.dense = open_dense(index, component)
        self.encoder = self.dense.query_encoder(model, device, backend)
        self.params = self.dense.search_parameters(ef_search=ef_search, nprobe=nprobe)
        self.search_overrides = {k: v for k, v in (("efSearch", ef_search), ("nprobe", nprobe)) if v}
        self.name = name

    def describe(self) -> dict:
        return {**super().describe(), "index": self.dense.kind, "parameters": self.dense.entry.get("parameters", {}),
                "search_parameters": self.search_overrides,
                "encoder": {k: v for k, v in self.encoder.describe().items() if k != "model_path"}}

    def encode(self, queries: Sequence[Query]) -> np.ndarray:
        return self.encoder.encode_queries([q.text for q in queries])

    def retrieve(self, queries: Sequence[Query], k: int) -> Run:
        """The top ``k`` of each query as arrays (faiss's order; rows faiss did not fill, -1, left out)."""
        run = Run()
        if not queries:
            return run
        scores, rows = self.dense.search(self.encode(queries), k, self.params)
        ids = self.dense.ids
        for q, q_scores, q_rows in zip(queries, scores, rows):
            found = q_rows >= 0
            if not found.all():
                q_scores, q_rows = q_scores[found], q_rows[found]
            run[q.id] = Ranked.of_stage(ids, q_rows, q_scores, self.name)
        return run
