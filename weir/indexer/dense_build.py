"""The dense component built (:func:`build_dense`): the passages encoded (or their vectors reused from another index
with the same encoder, or given by a distributed build's workers), stored as ``vectors.npy`` with the docid map, and
indexed in faiss; the files and the index types are described in :mod:`weir.indexer.dense`.

The corpus is streamed in chunks (encoded, added, written, dropped): no more than one chunk of texts is held.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

import numpy as np

from weir.core.types import Document, InputError, batched
from weir.indexer.dense import (DOCIDS_FILE, INDEX_FILE, IVF_TYPES, VECTORS_FILE, DenseConfig,
                                index_from_vectors, index_parameters, new_index, resolved_kind, write_on_disk_index)

log = logging.getLogger(__name__)


class ReusedVectors:
    """The float32 vectors of another index's flat dense component, by document id (``DenseConfig.vectors_from``)."""

    def __init__(self, index_path: str | os.PathLike, encoder, corpus_sha256: str | None):
        import faiss

        from weir.indexer.index_dir import Index

        source = Index(index_path)
        entry = source.manifest["components"].get("dense")
        if entry is None or entry.get("index") != "flat":
            raise InputError(f"--dense-vectors-from {index_path}: needs an index with a flat dense component")
        if corpus_sha256 is not None and source.manifest["collection"].get("sha256") != corpus_sha256:
            raise InputError(f"--dense-vectors-from {index_path}: that index was built from another corpus")
        theirs, ours = entry["encoder"], encoder.describe()
        keys = ("model_sha256", "pooling", "normalize", "dim", "passage_max_length")
        if any(theirs.get(k) != ours.get(k) for k in keys) or not ours.get("model_sha256"):
            raise InputError(f"--dense-vectors-from {index_path}: its encoder differs from this build's "
                             f"({', '.join(f'{k} {theirs.get(k)!r} vs {ours.get(k)!r}' for k in keys)})")
        path = source.component_path("dense")
        self.index = faiss.read_index(str(path / INDEX_FILE))
        with open(path / DOCIDS_FILE, encoding="utf-8") as f:
            self.row_of = {line.rstrip("\n"): i for i, line in enumerate(f)}
        self.source = {"index": str(Path(index_path).resolve()), "manifest_created": source.manifest.get("created")}
        self.reused = 0

    def vectors(self, chunk: list[Document], encode) -> np.ndarray:
        """The vectors of ``chunk``: copied where the source has the document, ``encode``d otherwise."""
        rows = [self.row_of.get(d.id) for d in chunk]
        out = np.empty((len(chunk), self.index.d), dtype=np.float32)
        missing = [i for i, r in enumerate(rows) if r is None]
        for i, r in enumerate(rows):
            if r is not None:
                out[i] = self.index.reconstruct(r)
        if missing:
            out[missing] = encode([chunk[i].contents for i in missing])
        self.reused += len(chunk) - len(missing)
        return out


def build_dense(documents: Iterable[Document], out: Path, config: DenseConfig | None = None, *,
                corpus_sha256: str | None = None, computed=None, shared=None) -> dict:
    """Encode ``documents`` (title + " " + text, as the BEIR figures) and write the dense component to ``out``;
    return its manifest entry (minus checksums). ``computed``: a function from a chunk of documents to their vectors,
    already encoded elsewhere with this config's encoder (the block files of a distributed build); ``shared``: the
    vectors of the term-weighting pass (:class:`weir.indexer.inputs.SharedDense`)."""
    from weir.indexer.encoder import shared_encoder

    config = config or DenseConfig()
    config.check()
    out.mkdir(parents=True, exist_ok=True)
    encoder = shared_encoder(config.model, **config.encoder_options())
    reuse = ReusedVectors(config.vectors_from, encoder, corpus_sha256) if config.vectors_from else None
    if computed is None and shared is not None:
        computed = lambda chunk: shared.vectors(chunk, encoder.encode_passages)  # noqa: E731
    if computed is None:
        computed = (lambda chunk: encoder.encode_passages([d.contents for d in chunk])) if reuse is None else \
            (lambda chunk: reuse.vectors(chunk, encoder.encode_passages))
    n, streaming = _write_vectors(documents, out, config, encoder.dim, computed)
    kind = resolved_kind(config, n)
    params = _write_faiss(out, config, n, encoder.dim, streaming)
    entry = {k: v for k, v in asdict(config).items() if k in ("batch_size", "chunk_size")}
    reused = {} if reuse is None else {
        "vectors_reused": {**reuse.source, "documents": reuse.reused, "encoded": n - reuse.reused}}
    if shared is not None:
        reused["shared_pass"] = shared.record
    return {"type": f"faiss-{kind}", "documents": n, **reused,
            "encoder": {**encoder.describe(), "device": encoder.device, "fp16": encoder.fp16}, "index": kind,
            "parameters": {**params, **entry, "contents": "title + ' ' + text (BEIR flat)",
                           "vectors": "float16 (n, dim) in vectors.npy, row i = line i of docids.txt"}}


def _write_vectors(documents: Iterable[Document], out: Path, config: DenseConfig, dim: int, vectors_of):
    """Write the docid map and ``vectors.npy`` (float16) of ``documents``, ``config.chunk_size`` at a time; return
    how many, and the index of their float32 vectors where it needs no training (flat, HNSW: filled as the chunks
    come). ``auto`` fills a flat index until the passages outnumber
    :data:`weir.indexer.dense.AUTO_FLAT_MAX`, then drops it (IVF-PQ is
    trained once all are stored)."""
    kind = resolved_kind(config, 0)
    streaming = new_index(kind, dim, index_parameters(config, 0, dim)) if kind not in IVF_TYPES else None
    warn_at = _physical_memory() // 2 if kind == "flat" else None
    raw_path = out / "vectors.f16.partial"
    n = 0
    with open(out / DOCIDS_FILE, "w", encoding="utf-8") as ids, open(raw_path, "wb") as raw:
        for chunk in batched(documents, config.chunk_size):
            vectors = vectors_of(chunk)
            if streaming is not None and resolved_kind(config, n + len(chunk)) != kind:
                streaming = None  # the flat vectors so far freed: IVF-PQ, trained from vectors.npy at the end
            if streaming is not None:
                streaming.add(vectors)
                if warn_at and (n + len(chunk)) * dim * 4 > warn_at:
                    log.warning("the flat dense index holds %.1f GiB of float32 vectors after %d passages, half of "
                                "this machine's memory, and grows with each one: --dense-index auto or ivfpq keeps "
                                "48 bytes a passage in memory", (n + len(chunk)) * dim * 4 / 2 ** 30, n + len(chunk))
                    warn_at = None
            raw.write(vectors.astype(np.float16).tobytes())
            ids.writelines(f"{d.id}\n" for d in chunk)
            n += len(chunk)
    if n == 0:
        raise InputError("the dense index needs at least one document")
    stored = np.lib.format.open_memmap(out / VECTORS_FILE, mode="w+", dtype=np.float16, shape=(n, dim))
    source = np.memmap(raw_path, dtype=np.float16, mode="r", shape=(n, dim))
    for start in range(0, n, 65536):
        stored[start:start + 65536] = source[start:start + 65536]
    stored.flush()
    del stored, source
    os.remove(raw_path)
    return n, streaming


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 0


def _write_faiss(out: Path, config: DenseConfig, n: int, dim: int, streaming) -> dict:
    """Write the faiss index of the stored vectors (``streaming``, already filled, or one built from
    ``vectors.npy``); return its parameters."""
    import faiss

    params, kind = index_parameters(config, n, dim), resolved_kind(config, n)
    if config.on_disk:
        params["parts"] = write_on_disk_index(np.load(out / VECTORS_FILE, mmap_mode="r"), kind, params, out)
    else:
        index = streaming if streaming is not None else \
            index_from_vectors(np.load(out / VECTORS_FILE, mmap_mode="r"), kind, params)
        faiss.write_index(index, str(out / INDEX_FILE))
    return params
