"""`weir index build --shard-set N`: every shard of a collection in one run, the learned weights computed once over
the whole collection (:func:`build_shard_set`), each shard then built by :func:`weir.indexer.build.build_index`."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from weir.core.types import Document, InputError
from weir.indexer.build import check_components, dense_config, progress, prune_corpus, build_index
from weir.indexer.collections import Collection
from weir.indexer.index_dir import staged_directory
from weir.indexer.inputs import BuildInputs, CollectionWeights
from weir.indexer.weighting.build import learned_kinds


def shard_name(index: int, count: int) -> str:
    return f"shard-{index}-of-{count}"


@dataclass
class CollectionPass:
    """What a shard set computes once over the whole collection for all its shards: the learned weights
    (:class:`weir.indexer.inputs.CollectionWeights`); on Ray also a maker of readers of the dense vectors the workers
    encoded (one reader per shard: it passes over the other shards' rows) and the run's record."""

    weights: CollectionWeights | None = None
    vectors: Callable[[], Callable[[list[Document]], np.ndarray]] | None = None
    distributed: dict | None = None


def build_shard_set(collection: str | os.PathLike, out: str | os.PathLike, count: int, *,
                    components: tuple[str, ...] = ("bm25",), overwrite: bool = False, skip_empty: bool = False,
                    threads: int | None = None, dense=None, learned: dict | None = None, prune=None,
                    device: str | None = None, ray=None) -> list[dict]:
    """Every shard of ``count`` into ``out/shard-I-of-N`` (the shard ``--shard I/N`` builds), in one run; return
    their manifests.

    Why a set rather than N builds of one shard: the learned weights are computed once over the whole collection (in
    the single index's batches, with its term statistics), then each shard indexes its documents' weights. A
    BM25-shaped DeepImpact head then reads the whole collection's document frequencies and mean length, and every
    shard quantizes impacts with the whole collection's largest impact, so each document's postings are the ones a
    single index of the collection gives it. Impact scores then compare across the shards (the sharded server
    serves ``deepimpact`` and ``deepimpact+bm25`` only from such a set); shards built one by one each have a scale of
    their own. BM25 and dense need no such pass: their scores are made comparable at serving
    (:mod:`weir.indexer.shards`).

    With ``ray`` (an :class:`weir.indexer.distributed.RayOptions`) that pass is the distributed build's: the workers
    score, weigh and encode the whole collection once into resumable block files, and each shard's components are
    built from its documents' rows. The set is built aside and renamed into place when every shard is complete."""
    from weir.indexer.shards import ShardSpec

    if count < 1:
        raise InputError(f"a shard set has at least one shard (got --shard-set {count})")
    check_components(components)
    out = Path(out)
    coll = Collection.open(collection)
    common = {"components": tuple(components), "skip_empty": skip_empty, "threads": threads, "dense": dense,
              "learned": learned, "prune": prune, "device": device}
    manifests = []
    with staged_directory(out, overwrite=overwrite) as tmp:
        passed = None
        if learned_kinds(components) or (ray is not None and "dense" in components):
            passed = _collection_pass(coll, tmp, out, ray, **common)
        for i in range(count):
            manifests.append(build_index(collection, tmp / shard_name(i, count), shard=ShardSpec(i, count),
                                         collection_pass=passed, **common))
    if ray is not None:
        from weir.indexer.distributed import finish

        finish(out, ray)
    return manifests


def _collection_pass(coll: Collection, tmp: Path, out: Path, ray, *, components: tuple[str, ...], skip_empty: bool,
                     threads: int | None, dense, learned: dict | None, prune, device: str | None) -> CollectionPass:
    """The shard set's pass over the whole collection (less the documents every shard prunes): the learned weights,
    in this process or on Ray workers (which encode the dense vectors too)."""
    import shutil

    from weir.indexer.document_pass import collection_weights

    corpus = coll.corpus(skip_empty=skip_empty)
    keep = None
    if prune is not None:  # the documents every shard keeps (each shard records its pruning again)
        scratch = tmp / ".pruning"
        scratch.mkdir()
        _, keep = prune_corpus(corpus, prune, scratch, device, ray, out)
        shutil.rmtree(scratch)
    if ray is None:
        documents = (d for d in progress(corpus, "shard set: the collection's learned weights")
                     if keep is None or d.id in keep)
        return CollectionPass(collection_weights(documents, learned or {}, components,
                                                 dense=dense_config(dense, components)))
    from weir.indexer.distributed import compute_blocks

    # the passage states depend on the passage alone: each shard's build computes its own (an in-process pass)
    inputs = BuildInputs(components=tuple(c for c in components if c != "attention"), threads=threads,
                         dense=dense_config(dense, components), learned=learned or {})
    record = compute_blocks(corpus, inputs, keep, out, ray, device=device)
    vectors = inputs.dense_vectors
    return CollectionPass(CollectionWeights.of(inputs.learned_memo) if learned_kinds(components) else None,
                          vectors.for_a_shard if vectors is not None else None, record)
