"""Dense first-stage retrieval: queries encoded in a batch (ranker.encoder), searched in the faiss index of an index
directory's ``dense`` component, faiss rows mapped back to document ids.

:class:`DenseIndex` is the opened component (faiss index, docid map, the float16 passage vectors memory-mapped for
rerankers); it is opened once per process and shared by every retriever over it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import numpy as np

from indexer.dense import DOCIDS_FILE, INDEX_FILE, VECTORS_FILE
from ranker.base import Retriever
from ranker.index import Index
from weir.types import Hit, InputError, Query, Run


class DenseIndex:
    """The ``dense`` component of an index directory, opened: faiss index, docids, stored vectors, encoder settings."""

    def __init__(self, path: Path, entry: dict):
        import faiss

        self.path, self.entry = Path(path), entry
        self.kind = entry.get("index", "flat")
        self.encoder_settings = entry.get("encoder", {})
        self.faiss = faiss.read_index(str(self.path / INDEX_FILE))
        with open(self.path / DOCIDS_FILE, encoding="utf-8") as f:
            self.docids = [line.rstrip("\n") for line in f]
        if len(self.docids) != self.faiss.ntotal:
            raise InputError(f"{self.path}: {len(self.docids)} docids for {self.faiss.ntotal} vectors (corrupt index)")

    @property
    def dim(self) -> int:
        return self.faiss.d

    @cached_property
    def vectors(self) -> np.ndarray:
        """The passage embeddings, float16 (n, dim), memory-mapped: row i is document ``docids[i]``."""
        return np.load(self.path / VECTORS_FILE, mmap_mode="r")

    @cached_property
    def row_of(self) -> dict[str, int]:
        return {doc_id: i for i, doc_id in enumerate(self.docids)}

    def search_parameters(self, *, ef_search: int | None = None, nprobe: int | None = None):
        """Per-call faiss search parameters (HNSW efSearch, IVF nprobe), or None for the index's stored ones."""
        import faiss

        if self.kind == "hnsw" and ef_search:
            return faiss.SearchParametersHNSW(efSearch=int(ef_search))
        if self.kind == "ivfpq" and nprobe:
            return faiss.SearchParametersIVF(nprobe=int(nprobe))
        return None

    def search(self, vectors: np.ndarray, k: int, params=None) -> tuple[np.ndarray, np.ndarray]:
        k = min(int(k), self.faiss.ntotal)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if params is None:
            return self.faiss.search(vectors, k)
        return self.faiss.search(vectors, k, params=params)


_OPENED: dict[tuple[str, str], DenseIndex] = {}
_OPENED_LOCK = threading.Lock()


def open_dense(index: Index, component: str = "dense") -> DenseIndex:
    """The opened dense component of ``index`` (once per process, keyed by path and checksum)."""
    path = index.component_path(component)
    entry = index.manifest["components"][component]
    key = (str(path.resolve()), entry.get("sha256", ""))
    with _OPENED_LOCK:
        if key not in _OPENED:
            _OPENED[key] = DenseIndex(path, entry)
        return _OPENED[key]


class DenseRetriever(Retriever):
    """Encode the queries with the model the index was built with, search faiss, map rows to docids.

    ``model`` overrides the encoder recorded in the manifest (it must produce the same space: e.g. the same model at
    another path); ``ef_search`` / ``nprobe`` override the stored HNSW / IVF search parameters."""

    def __init__(self, index: Index, *, component: str = "dense", model: str | None = None, device: str | None = None,
                 ef_search: int | None = None, nprobe: int | None = None, name: str = "dense"):
        from ranker.encoder import QUERY_MAX_LENGTH, shared_encoder

        self.dense = open_dense(index, component)
        settings = self.dense.encoder_settings
        self.encoder = shared_encoder(model or settings.get("model"), device=device,
                                      query_max_length=settings.get("query_max_length", QUERY_MAX_LENGTH),
                                      pooling=settings.get("pooling"), normalize=settings.get("normalize", True))
        if self.encoder.dim != self.dense.dim:
            raise InputError(f"the encoder gives {self.encoder.dim}-dimensional vectors, the index at "
                             f"{self.dense.path} holds {self.dense.dim}: use the model it was built with")
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
        run = Run({q.id: [] for q in queries})
        if not queries:
            return run
        scores, rows = self.dense.search(self.encode(queries), k, self.params)
        docids, name = self.dense.docids, self.name
        for q, q_scores, q_rows in zip(queries, scores.tolist(), rows.tolist()):
            run[q.id] = [Hit(docids[row], score, rank, {name: score})
                         for rank, (score, row) in enumerate(((s, r) for s, r in zip(q_scores, q_rows) if r >= 0), start=1)]
        return run
