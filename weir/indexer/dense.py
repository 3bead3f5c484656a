"""The dense component of an index: passage embeddings (:mod:`weir.indexer.encoder`) in a faiss index, plus a docid map.
Here: its settings (:class:`DenseConfig`), the faiss index types and how an index is made from stored vectors, and the
opened component (:func:`open_dense`); built by :func:`weir.indexer.dense_build.build_dense`.

Files in the component directory:

- ``index.faiss``: the faiss index over L2-normalized embeddings, inner product metric (= cosine). ``auto`` (the
  default) is ``flat`` (exact, IndexFlatIP: 1.5 KiB a passage in memory at dim 384) up to :data:`AUTO_FLAT_MAX`
  passages, and ``ivfpq`` with exact re-scoring above (48 bytes of codes a passage; 8.8M passages in about 0.5 GiB
  instead of 13.6); ``hnsw`` (IndexHNSWFlat: M, efConstruction, efSearch), ``ivfflat`` (IndexIVFFlat: nlist,
  nprobe; exact vectors, searched in the nprobe nearest lists) and ``ivfpq`` (IndexIVFPQ: nlist, m sub-quantizers of
  nbits each, nprobe) trade exactness for speed or memory. IVF indexes are trained on at least
  :data:`TRAIN_PER_LIST` vectors a list (faiss warns below 39);
- ``index.ivfdata`` (IVF types built ``on_disk``): the inverted lists, out of ``index.faiss``, memory-mapped at
  search (faiss ``OnDiskInvertedLists``), so an index larger than memory is searched from the page cache. They are
  built the way faiss's on-disk demo builds them: the trained empty index is filled part by part (each part's
  vectors added, the part written), and the parts' lists are merged into the file (``merge_ondisk``). Neither the
  build nor the search holds all vectors in memory; the lists hold the same entries, in the same order, as the
  in-memory index, which gives the same results;
- ``docids.txt``: one document id a line, line i = faiss row i;
- ``vectors.npy``: the passage embeddings as float16 (n, dim), so rerankers and features can use dense similarity
  without encoding again, and another faiss index can be built from them without the model.

Re-scoring (``rerank`` candidates, IVF-PQ's default): faiss ranks by the compressed codes, then the top ``max(k,
rerank)`` candidates are scored again exactly from ``vectors.npy`` (memory-mapped: read a row a candidate) and ranked
by that score (then row). The codes only choose candidates; every score is the cosine with the stored vector, so the
hits of IVF-PQ shards, each trained on its own vectors, merge by score as exact shards do. faiss's ``IndexRefine``
does the same from vectors held in memory, which is what this avoids.

:class:`DenseIndex` is the opened component (faiss index, docid map, the float16 passage vectors memory-mapped for
rerankers); it is opened once per process and shared by every retriever and feature over it.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from weir.core.hits import DocIds
from weir.core.strings import StringTable
from weir.core.types import InputError

INDEX_TYPES = ("auto", "flat", "hnsw", "ivfflat", "ivfpq")
IVF_TYPES = ("ivfflat", "ivfpq")
AUTO_FLAT_MAX = 1_000_000  # ``auto``: flat up to this many passages (1.4 GiB of float32 at dim 384), IVF-PQ above
TRAIN_PER_LIST = 40        # IVF training vectors per inverted list, at least (faiss warns below 39)
TRAIN_MIN = 262_144        # ... and at least this many (or all of them)
RERANK = 1000              # IVF-PQ: candidates re-scored exactly from the stored vectors, by default (bench/dense_scale.py)
INDEX_FILE, DOCIDS_FILE, VECTORS_FILE, LISTS_FILE = "index.faiss", "docids.txt", "vectors.npy", "index.ivfdata"
PART_ROWS = 1 << 18  # vectors a part of an on-disk IVF index holds while it is filled (float32: 384 MiB at dim 384)


@dataclass
class DenseConfig:
    """How to build the dense component. ``None`` parameters are chosen from the collection size at build time."""

    index: str = "auto"               # flat up to AUTO_FLAT_MAX passages, ivfpq (re-scored) above
    model: str | None = None          # Hugging Face name or local path; None: all-MiniLM-L6-v2 (offline copy)
    device: str | None = None         # None: cuda when available, else cpu
    backend: str | None = None        # inference backend (weir.core.inference); None: its default_backend
    batch_size: int = 64
    chunk_size: int = 1024            # documents encoded (and held) at a time
    max_length: int | None = None     # passage word pieces; None: the encoder's default (256)
    # HNSW
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    # IVF (IVF-Flat, IVF-PQ)
    nlist: int | None = None          # None: about 4 * sqrt(n), at most n / 39 (faiss's points per centroid)
    nprobe: int = 16
    on_disk: bool = False             # the inverted lists in index.ivfdata, memory-mapped at search
    # IVF-PQ
    pq_m: int | None = None           # None: dim / 8 (8 dimensions per sub-quantizer)
    nbits: int = 8
    rerank: int | None = None         # IVF-PQ: candidates re-scored from vectors.npy (None: RERANK; 0: none)
    # an index of the same collection (same corpus file) with a flat dense component of the same encoder: its
    # vectors are reused for the documents it has (exactly: a flat index holds the float32 vectors) and only the others
    # are encoded. What a sweep over pruned fractions, or a rebuild with another faiss index type, needs.
    vectors_from: str | None = None
    # with deepct / deepimpact on the same backbone, backend and input length: the dense vectors are pooled from the
    # term-weighting pass's first window (one backbone pass per passage) instead of a pass of their own
    shared_pass: bool = True
    extra: dict = field(default_factory=dict)

    def encoder_options(self, **overrides) -> dict:
        """The passage encoder's settings (:class:`weir.indexer.encoder.Encoder`), ``overrides`` (device, threads)
        replacing this config's."""
        options = {"device": self.device, "batch_size": self.batch_size, "backend": self.backend, **overrides}
        if self.max_length:
            options["passage_max_length"] = self.max_length
        return options

    def check(self) -> None:
        if self.index not in INDEX_TYPES:
            raise InputError(f"unknown dense index type {self.index!r}; known: {', '.join(INDEX_TYPES)}")
        for name in ("batch_size", "chunk_size", "hnsw_m", "ef_construction", "ef_search", "nbits", "nprobe"):
            if getattr(self, name) < 1:
                raise InputError(f"dense index parameter {name} must be >= 1 (got {getattr(self, name)})")
        if self.rerank is not None and self.rerank < 0:
            raise InputError(f"dense index parameter rerank must be >= 0 (got {self.rerank})")
        if self.rerank and self.index not in ("auto", "ivfpq"):
            raise InputError(f"re-scoring (rerank) is for IVF-PQ, whose codes approximate the scores; "
                             f"{self.index!r} scores exactly")
        if self.nbits > 16:
            raise InputError(f"dense index parameter nbits must be <= 16 (got {self.nbits})")
        if self.on_disk and self.index not in IVF_TYPES:
            raise InputError(f"an on-disk dense index is an IVF index (--dense-index {' or '.join(IVF_TYPES)}); "
                             f"{self.index!r} is held in memory")


def resolved_kind(config: DenseConfig, n: int) -> str:
    """The faiss index type ``config`` builds over ``n`` vectors (``auto`` resolved)."""
    if config.index != "auto":
        return config.index
    return "flat" if n <= AUTO_FLAT_MAX else "ivfpq"


def index_parameters(config: DenseConfig, n: int, dim: int) -> dict:
    """The faiss parameters of ``config`` for ``n`` vectors of ``dim`` dimensions (defaults resolved)."""
    kind = resolved_kind(config, n)
    if kind == "flat":
        return {"metric": "inner_product"}
    if kind == "hnsw":
        return {"metric": "inner_product", "M": config.hnsw_m, "efConstruction": config.ef_construction,
                "efSearch": config.ef_search}
    nlist = config.nlist or max(1, min(int(4 * math.sqrt(n)), n // 39))
    if nlist > n:
        raise InputError(f"IVF: nlist={nlist} is more than the {n} vectors to index")
    train = min(n, max(TRAIN_MIN, TRAIN_PER_LIST * nlist))
    if kind == "ivfflat":
        return {"metric": "inner_product", "nlist": nlist, "nprobe": min(config.nprobe, nlist),
                "on_disk": config.on_disk, "train_vectors": train}
    pq_m = config.pq_m or max(1, dim // 8)
    if dim % pq_m:
        raise InputError(f"IVF-PQ: the number of sub-quantizers m={pq_m} must divide the dimension {dim}")
    if n < 2 ** config.nbits:
        raise InputError(f"IVF-PQ: {n} vectors cannot train {2 ** config.nbits} centroids per sub-quantizer "
                         f"(nbits={config.nbits}); use fewer bits (e.g. --nbits 4) or a flat index")
    return {"metric": "inner_product", "nlist": nlist, "m": pq_m, "nbits": config.nbits,
            "nprobe": min(config.nprobe, nlist), "on_disk": config.on_disk, "train_vectors": train,
            "rerank": RERANK if config.rerank is None else config.rerank}


def new_index(kind: str, dim: int, params: dict):
    """An empty faiss index of ``kind`` with ``params`` (as :func:`index_parameters` gives them)."""
    import faiss

    if kind == "flat":
        return faiss.IndexFlatIP(dim)
    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params["M"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params["efConstruction"]
        index.hnsw.efSearch = params["efSearch"]
        return index
    if kind in IVF_TYPES:
        quantizer = faiss.IndexFlatIP(dim)
        if kind == "ivfflat":
            index = faiss.IndexIVFFlat(quantizer, dim, params["nlist"], faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexIVFPQ(quantizer, dim, params["nlist"], params["m"], params["nbits"],
                                     faiss.METRIC_INNER_PRODUCT)
        index.nprobe = params["nprobe"]
        return index
    raise InputError(f"unknown dense index type {kind!r}; known: {', '.join(INDEX_TYPES)}")


@contextlib.contextmanager
def _native_stdout_to_stderr():
    """faiss's on-disk lists report on C stdout (resizing the file, finding it in another directory): sent to stderr,
    where they cannot mix with a run written to stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _trained(vectors: np.ndarray, kind: str, params: dict, seed: int):
    """An empty index of ``kind``, trained (IVF) on a seeded sample of the parameters' ``train_vectors`` rows (else
    :data:`TRAIN_MIN`), sorted so that a memory-mapped file is read in order."""
    n, dim = vectors.shape
    index = new_index(kind, dim, params)
    if not index.is_trained:
        size = min(n, params.get("train_vectors") or TRAIN_MIN)
        rows = np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))
        started = time.perf_counter()
        index.train(np.ascontiguousarray(vectors[rows], dtype=np.float32))
        if n > PART_ROWS:  # minutes at MS MARCO size: say what took them
            print(f"dense index: {kind} trained on {size:,} vectors in {time.perf_counter() - started:.0f} s",
                  file=sys.stderr)
    return index


def _add(index, vectors: np.ndarray, start: int, stop: int, chunk: int, *, with_ids: bool = False) -> None:
    """Add rows ``start:stop`` of ``vectors``, ``chunk`` at a time; ``with_ids``: under their row numbers (a part of
    an on-disk index, whose lists are merged as they are)."""
    from tqdm import tqdm

    with tqdm(total=stop - start, unit="vec", desc="dense index: faiss add", disable=stop - start < PART_ROWS,
              file=sys.stderr) as bar:
        for at in range(start, stop, chunk):
            rows = np.ascontiguousarray(vectors[at:min(stop, at + chunk)], dtype=np.float32)
            if with_ids:
                index.add_with_ids(rows, np.arange(at, at + len(rows), dtype=np.int64))
            else:
                index.add(rows)
            bar.update(len(rows))


def index_from_vectors(vectors: np.ndarray, kind: str, params: dict, *, chunk: int = 65536, seed: int = 0):
    """Build a faiss index of ``kind`` from stored vectors (any float dtype, e.g. the float16 ``vectors.npy``)."""
    index = _trained(vectors, kind, params, seed)
    _add(index, vectors, 0, len(vectors), chunk)
    return index


def write_on_disk_index(vectors: np.ndarray, kind: str, params: dict, out: Path, *, part_rows: int = PART_ROWS,
                        chunk: int = 65536, seed: int = 0) -> int:
    """Write an IVF index of ``kind`` over stored ``vectors`` (memory-mapped, e.g. ``vectors.npy``) to ``out`` as
    ``index.faiss`` with its inverted lists in ``index.ivfdata``; return the number of parts merged. Trained as
    :func:`index_from_vectors` trains (same sample, same seed), so its lists equal the in-memory index's."""
    import shutil

    import faiss
    from faiss.contrib.ondisk import merge_ondisk

    if kind not in IVF_TYPES:
        raise InputError(f"an on-disk dense index is an IVF index ({', '.join(IVF_TYPES)}), not {kind!r}")
    index = _trained(vectors, kind, params, seed)
    parts_dir = out / "ivf-parts.partial"
    parts_dir.mkdir(parents=True, exist_ok=True)
    parts = []
    try:
        for i, start in enumerate(range(0, len(vectors), part_rows)):
            part = faiss.clone_index(index)
            _add(part, vectors, start, min(len(vectors), start + part_rows), chunk, with_ids=True)
            parts.append(str(parts_dir / f"{i:06d}.faiss"))
            faiss.write_index(part, parts[-1])
            del part
        with _native_stdout_to_stderr():
            merge_ondisk(index, parts, str(out / LISTS_FILE))
        faiss.write_index(index, str(out / INDEX_FILE))
    finally:
        shutil.rmtree(parts_dir, ignore_errors=True)
    return len(parts)


class DenseIndex:
    """The ``dense`` component of an index directory, opened: faiss index, docids, stored vectors, encoder settings."""

    def __init__(self, path: Path, entry: dict):
        import faiss

        self.path, self.entry = Path(path), entry
        self.kind = entry.get("index", "flat")
        self.encoder_settings = entry.get("encoder", {})
        self.on_disk = bool(entry.get("parameters", {}).get("on_disk"))
        # an on-disk index finds its lists (index.ivfdata) beside index.faiss, wherever the directory now is
        if self.on_disk:
            with _native_stdout_to_stderr():
                self.faiss = faiss.read_index(str(self.path / INDEX_FILE), faiss.IO_FLAG_ONDISK_SAME_DIR)
        else:
            self.faiss = faiss.read_index(str(self.path / INDEX_FILE))
        try:  # row -> document id, memory-mapped: no Python string per row (millions of rows at MS MARCO size)
            self.docids = StringTable.read(self.path / DOCIDS_FILE)
        except ValueError as error:
            raise InputError(f"{self.path}: {error} (corrupt index)") from None
        if len(self.docids) != self.faiss.ntotal:
            raise InputError(f"{self.path}: {len(self.docids)} docids for {self.faiss.ntotal} vectors (corrupt index)")

    @property
    def dim(self) -> int:
        return self.faiss.d

    def query_encoder(self, model: str | None = None, device: str | None = None, backend: str | None = None):
        """The (shared) encoder of queries into this index's space: the model it was built with, or ``model`` (which
        must give the same space, e.g. the same model at another path), with its pooling, normalization and query
        length, on ``backend`` (default: ``$WEIR_BACKEND``, else the passages' own backend, or the fastest exact one
        on ``device`` where the passages were encoded with an exact backend; a backend whose vectors differ from the
        passages' is refused, never mixed). So an index built in fp32 stays searchable as it was built, whatever the
        default."""
        from weir.core.inference import EXACT, check_compatible, exact_backend
        from weir.core.runtime import select_device
        from weir.indexer.encoder import QUERY_MAX_LENGTH, shared_encoder

        settings = self.encoder_settings
        built = settings.get("backend") or "torch"  # indexes from before backends were recorded: fp32 torch
        device = select_device(device)
        backend = backend or os.environ.get("WEIR_BACKEND") or (exact_backend(device) if built in EXACT else built)
        check_compatible(built, backend, f"the dense component at {self.path}")
        encoder = shared_encoder(model or settings.get("model"), device=device, backend=backend,
                                 query_max_length=settings.get("query_max_length", QUERY_MAX_LENGTH),
                                 pooling=settings.get("pooling"), normalize=settings.get("normalize", True))
        made = encoder.forward.describe().get("recipe")
        if built not in EXACT and settings.get("recipe") != made:
            raise InputError(f"the dense component at {self.path} was encoded by another {built} export (recipe "
                             f"{settings.get('recipe')!r}, this weir's {made!r}): its vectors and the queries' "
                             "would differ; rebuild the index")
        if encoder.dim != self.dim:
            raise InputError(f"the encoder gives {encoder.dim}-dimensional vectors, the index at {self.path} holds "
                             f"{self.dim}: use the model it was built with")
        return encoder

    @cached_property
    def vectors(self) -> np.ndarray:
        """The passage embeddings, float16 (n, dim), memory-mapped: row i is document ``docids[i]``."""
        return np.load(self.path / VECTORS_FILE, mmap_mode="r")

    @cached_property
    def ids(self) -> DocIds:
        """Faiss row -> document id, as the table of the hits the dense stage ranks."""
        return DocIds(self.docids)

    def rows(self, doc_ids: Sequence[str]) -> np.ndarray:
        """The faiss row (= stored vector) of each document id, -1 for one the index does not hold."""
        return self.docids.find(list(doc_ids))

    def search_parameters(self, *, ef_search: int | None = None, nprobe: int | None = None):
        """Per-call faiss search parameters (HNSW efSearch, IVF nprobe), or None for the index's stored ones."""
        import faiss

        if self.kind == "hnsw" and ef_search:
            return faiss.SearchParametersHNSW(efSearch=int(ef_search))
        if self.kind in IVF_TYPES and nprobe:
            return faiss.SearchParametersIVF(nprobe=int(nprobe))
        return None

    @property
    def rerank(self) -> int:
        """Candidates re-scored exactly from the stored vectors (0: faiss's scores are the scores)."""
        return int(self.entry.get("parameters", {}).get("rerank") or 0)

    def search(self, vectors: np.ndarray, k: int, params=None) -> tuple[np.ndarray, np.ndarray]:
        """faiss's top ``k`` of each query vector (scores, rows; -1 rows where it found fewer); an index with
        ``rerank`` ranks faiss's top ``max(k, rerank)`` by their exact scores instead."""
        k = min(int(k), self.faiss.ntotal)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        depth = min(max(k, self.rerank), self.faiss.ntotal) if self.rerank else k
        scores, rows = self.faiss.search(vectors, depth) if params is None else \
            self.faiss.search(vectors, depth, params=params)
        if self.rerank:
            scores, rows = self.rescored(vectors, rows, k)
        return scores, rows

    def rescored(self, queries: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` of each query's candidate ``rows`` (-1: none) by the inner product with the stored vectors,
        ties by row; -1 rows (score -inf) where a query has fewer than ``k`` candidates. A row's score does not depend
        on the other candidates."""
        out_scores = np.full((len(rows), k), -np.inf, dtype=np.float32)
        out_rows = np.full((len(rows), k), -1, dtype=np.int64)
        for i, (query, candidates) in enumerate(zip(queries, rows)):
            candidates = np.unique(candidates[candidates >= 0])  # sorted: the file is read forwards
            if not len(candidates):
                continue
            # a row's score summed the same way whatever rows come with it (a matrix product's blocking would
            # not), so that a shard and the whole index give a passage the same score to the bit
            exact = (self.vectors[candidates].astype(np.float32) * query).sum(axis=1)
            order = np.lexsort((candidates, -exact))[:k]
            out_scores[i, :len(order)], out_rows[i, :len(order)] = exact[order], candidates[order]
        return out_scores, out_rows


_OPENED: dict[tuple[str, str], DenseIndex] = {}
_OPENED_LOCK = threading.Lock()


def open_dense(index, component: str = "dense") -> DenseIndex:
    """The opened dense component of ``index`` (an :class:`weir.indexer.index_dir.Index`; once per process, keyed by path
    and checksum)."""
    path = index.component_path(component)
    entry = index.manifest["components"][component]
    key = (str(path.resolve()), entry.get("sha256", ""))
    with _OPENED_LOCK:
        if key not in _OPENED:
            _OPENED[key] = DenseIndex(path, entry)
        return _OPENED[key]
