"""The Ray Data actors of a distributed build: each loads what it needs once, then per block reads the block's
documents from the corpus file (which every node must see at the same path) and writes the block's file.

- :class:`StatisticsWorker`: the collection statistics of its blocks' documents (``statistics/``), summed by the
  driver before any block is weighed (a BM25-shaped head reads the whole collection's).
- :class:`BlockWorker`: the steps of a phase over its blocks: quality scoring, or term weighting and dense encoding,
  in the batches a single process runs.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import numpy as np

from weir.indexer.collections import Corpus
from weir.indexer.distributed.blocks import write_block
from weir.indexer.distributed.plan import BLOCKS, STATISTICS, WORKERS


def _resolved(value):
    """``value``, fetched from Ray's object store when the driver put it there (``ray.put``)."""
    import ray

    return ray.get(value) if isinstance(value, ray.ObjectRef) else value


def _blocks_of(batch: dict):
    """The (index, offset, line number, count) of every block of a Ray Data batch."""
    for i, offset, lineno, count in zip(batch["index"], batch["offset"], batch["lineno"], batch["count"]):
        yield int(i), int(offset), int(lineno), int(count)


class StatisticsWorker:
    """A Ray Data actor: per block, the collection statistics of its documents (df, documents, terms), written to
    ``statistics/`` of the work directory; summed by :func:`weir.indexer.distributed.blocks.collection_statistics`."""

    def __init__(self, *, corpus: str, skip_empty: bool, keep, work_dir: str):
        self.corpus = Corpus(corpus, skip_empty=skip_empty)
        self.keep = _resolved(keep)
        self.work = Path(work_dir)

    def __call__(self, batch: dict) -> dict:
        from weir.indexer.weighting.model import CollectionTermCounts

        out: dict[str, list] = {"documents": [], "seconds": []}
        for i, offset, lineno, count in _blocks_of(batch):
            started = time.perf_counter()
            counts = CollectionTermCounts()
            for doc in self.corpus.read_block(offset, lineno, count, self.keep):
                counts.add(doc.contents)
            write_block(self.work, i, counts, STATISTICS)
            out["documents"].append(counts.n_docs)
            out["seconds"].append(time.perf_counter() - started)
        return out


class BlockWorker:
    """A Ray Data actor: loads the models once, then per block reads the documents, runs the steps, writes the block's
    file.

    The steps are the phase's: quality scoring (``quality``: the estimator's name and seed), or term weighting
    (``kinds``, with the models ``learned`` names) and dense encoding (``dense``). ``blocks``: the phase's block file
    directory."""

    def __init__(self, *, corpus: str, skip_empty: bool, keep, stats, work_dir: str, learned: dict, kinds: list[str],
                 dense, threads: int | None, device: str | None, blocks: str = BLOCKS, quality: dict | None = None,
                 states: bool = False):
        self.corpus = Corpus(corpus, skip_empty=skip_empty)
        self.keep, self.stats = _resolved(keep), _resolved(stats)
        self.work = Path(work_dir)
        self.blocks = blocks
        self.quality = None
        if quality is not None:
            from weir.core.runtime import prepare_device
            from weir.indexer.quality import open_estimator

            device = prepare_device(device, threads)
            self.quality = open_estimator(quality["estimator"], seed=int(quality.get("seed", 0)), device=device)
        self.dense = dense
        self.encoder = None
        if dense is not None:
            from weir.indexer.encoder import Encoder

            self.encoder = Encoder(dense.model, **dense.encoder_options(device=device, threads=threads))
        # the single build's document passes, so that the weights, vectors and states are the single build's
        own_encoder = self.encoder if dense is not None and dense.shared_pass and not dense.vectors_from else None
        from weir.indexer.document_pass import plan_passes

        settings = {**{f"{k}_model": learned[k] for k in kinds},
                    **{k: learned.get(k) for k in ("input", "backend", "batch_size")}}
        self.passes = plan_passes(kinds, settings, encoder=own_encoder, states=states, device=device, threads=threads)
        self.models = {k: m for p in self.passes for k, m in p.models.items()}
        self.shared = next((p for p in self.passes if p.encoder is not None), None)
        self.states = next((p for p in self.passes if p.states), None)
        (self.work / WORKERS).mkdir(parents=True, exist_ok=True)
        # who is working, for operators (and the tests that stop a worker mid-build)
        (self.work / WORKERS / str(os.getpid())).write_text(socket.gethostname() + "\n", encoding="utf-8")

    def _weights(self, docs) -> tuple[dict, float, list, list | None]:
        """The document passes over ``docs`` in the single build's blocks: each kind's weights, the seconds, each
        document's first window (pooled where the dense vectors come from the pass) and its quantized states (None
        without an attention component)."""
        from weir.indexer.document_pass import BATCH
        from weir.indexer.passage_states import quantize
        from weir.indexer.weighting.model import TermStatistics

        if not self.passes:
            return {}, 0.0, [], None
        started = time.perf_counter()
        needs = any(p.needs_statistics for p in self.passes)
        stats = TermStatistics([d.contents for d in docs], collection=self.stats) \
            if self.stats is not None and needs else None
        results: dict[str, list] = {k: [] for k in self.models}
        windows: list = []
        states: list | None = [] if self.states is not None else None
        for document_pass in self.passes:
            for start in range(0, len(docs), BATCH):
                block = document_pass.block(docs[start:start + BATCH], stats, start)
                for kind, weights in block.weights.items():
                    results[kind].extend(weights)
                if document_pass.encoder is not None:
                    windows.extend(block.windows)
                if document_pass.states:
                    states.extend(quantize(s) for s in block.states)
        return results, time.perf_counter() - started, windows, states

    def _vectors(self, docs, windows: list) -> tuple[np.ndarray | None, float]:
        if self.encoder is None:
            return None, 0.0
        started = time.perf_counter()
        if self.shared is not None:  # the pass's vectors; a passage without a window (no terms) encoded on its own
            from weir.indexer.inputs import SharedDense

            shared = SharedDense.of(docs, windows, self.encoder.dim)
            return shared.vectors(docs, self.encoder.encode_passages), time.perf_counter() - started
        size = int(self.dense.chunk_size)
        parts = [self.encoder.encode_passages([d.contents for d in docs[s:s + size]])
                 for s in range(0, len(docs), size)]
        return np.concatenate(parts), time.perf_counter() - started

    def _scores(self, docs) -> tuple[np.ndarray | None, float]:
        if self.quality is None:
            return None, 0.0
        started = time.perf_counter()
        scores = np.asarray(self.quality.score(docs), dtype=np.float64)
        return scores, time.perf_counter() - started

    def _block(self, offset: int, lineno: int, count: int) -> dict:
        """One block's file: its documents' ids, quality scores, learned weights and vectors, the models, the seconds
        each step took and the worker."""
        from weir.indexer.weighting.build import describe_model

        started = time.perf_counter()
        docs = self.corpus.read_block(offset, lineno, count, self.keep)
        read = time.perf_counter() - started
        scores, quality = self._scores(docs)
        weights, weighting, windows, states = self._weights(docs)
        vectors, dense = self._vectors(docs, windows)
        extra = {}
        if states is not None:
            from weir.indexer.document_pass import states_source

            extra = {"states": states, "states_dim": self.states.backbone.dim,
                     "states_source": states_source(self.states.backbone)}
        return {"docids": [d.id for d in docs], "quality": scores, "weights": weights, "dense": vectors, **extra,
                "models": {k: describe_model(m) for k, m in self.models.items()},
                "seconds": {"read": read, "quality": quality, "term_weighting": weighting, "dense": dense},
                "worker": f"{socket.gethostname()}:{os.getpid()}"}

    def __call__(self, batch: dict) -> dict:
        out: dict[str, list] = {"documents": [], "read": [], "quality": [], "term_weighting": [], "dense": [],
                                "worker": []}
        for i, offset, lineno, count in _blocks_of(batch):
            block = self._block(offset, lineno, count)
            write_block(self.work, i, block, self.blocks)
            for key, value in (("documents", len(block["docids"])), ("worker", block["worker"]),
                               *block["seconds"].items()):
                out[key].append(value)
        return out
