"""The stored documents of an index as flat arrays: titles and texts read without Java, from any thread.

A search call that returns text, and every reranker, reads the title and text of its hits. From Lucene that is one
bridge call per document under the one lock through which Java is reached (:mod:`weir.core.jvm`), then a JSON parse:
about 0.2 ms a document on these cores, so a ``bm25`` call of k=1000 with text spent most of its time, and most of
its GIL, fetching its texts (and under load every other call waited on that lock). Written once when the BM25
component is built, beside its Lucene files (``<component>/documents/``, so the component's checksum covers them):

- ``text.bin``: the UTF-8 of every document's title and text, in Lucene doc-number order;
- ``offsets.npy`` (int64, 2 x documents + 1): document ``i``'s title is ``text.bin[o[2i]:o[2i+1]]``, its text
  ``text.bin[o[2i+1]:o[2i+2]]``;
- ``meta.json``: counts, and the sha256 of the Lucene commit (``segments_N``) they were read from, checked at every
  load.

Doc number ``i`` is line ``i`` of the component's ``docids.txt`` (:mod:`weir.indexer.lucene`). The titles and texts
are exactly those Lucene's stored raw documents give (the export below reads them), so an index answers the same with
or without the store. An index built before this module has none and reads Lucene as before; ``weir index upgrade``
stores it in place. No library does this: pyserini's document access is the bridge call above, and a key-value store
(LMDB, SQLite) would add a dependency to hold what two arrays hold.
"""

from __future__ import annotations

import json
import mmap
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from weir.core import jvm
from weir.core.types import Document
from weir.indexer.postings import commit_digest

DIRECTORY = "documents"
FORMAT = 1


def title_and_text(raw: str) -> tuple[str, str]:
    """A stored raw document (``{"id", "contents", "title"}``, contents = title + " " + text) as (title, text)."""
    doc = json.loads(raw)
    title, contents = doc.get("title", ""), doc.get("contents", "")
    return title, contents[len(title) + 1:] if title and contents.startswith(title) else contents


@jvm.serialized
def _write_text(lucene_path: Path, path: Path) -> np.ndarray:
    """Write every stored document's title and text into ``path`` as it is read from Lucene, one document at a time
    (no list of all of them: at 8.8M passages that list was the build's peak memory); their offsets."""
    from weir.indexer.lucene import open_reader

    reader = open_reader(lucene_path)
    try:
        stored, n = reader.storedFields(), reader.maxDoc()
        offsets = np.zeros(2 * n + 1, dtype=np.int64)
        position = 0
        with open(path, "wb") as f:
            for i in range(n):
                raw = stored.document(i).get("raw") or ""
                for j, part in enumerate(title_and_text(raw) if raw else ("", "")):
                    data = part.encode("utf-8")
                    f.write(data)
                    offsets[2 * i + j] = position
                    position += len(data)
        offsets[-1] = position
        return offsets
    finally:
        reader.close()


def write_documents(lucene_path: Path) -> dict:
    """Export the stored documents of a finished Lucene component into ``<lucene_path>/documents``; returns what the
    manifest records."""
    lucene_path = Path(lucene_path)
    start = time.perf_counter()
    directory = lucene_path / DIRECTORY
    directory.mkdir(exist_ok=True)
    offsets = _write_text(lucene_path, directory / "text.bin")
    np.save(directory / "offsets.npy", offsets)
    documents, position = (len(offsets) - 1) // 2, int(offsets[-1])
    seconds = time.perf_counter() - start
    name, digest = commit_digest(lucene_path)
    meta = {"format": FORMAT, "documents": documents, "bytes": position, "seconds": round(seconds, 2),
            "lucene_commit": {"file": name, "sha256": digest}}
    (directory / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return {"directory": DIRECTORY, "documents": documents, "bytes": position, "seconds": round(seconds, 2)}


class DocumentStore:
    """The documents of a Lucene component, by collection id: memory-mapped, decoded only when asked for, safe to read
    from many threads at once."""

    def __init__(self, lucene_path: Path, docids: list[str]):
        directory = Path(lucene_path) / DIRECTORY
        meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
        name, digest = commit_digest(lucene_path)
        if meta.get("format") != FORMAT or meta["lucene_commit"] != {"file": name, "sha256": digest}:
            raise ValueError(f"{directory} was written for another Lucene commit or format; run `weir index upgrade`")
        if meta["documents"] != len(docids):
            raise ValueError(f"{directory} holds {meta['documents']} documents, the index {len(docids)}")
        self.offsets = np.load(directory / "offsets.npy", mmap_mode="r")
        with open(directory / "text.bin", "rb") as f:
            self._data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if meta["bytes"] else b""
        self.rows = {d: i for i, d in enumerate(docids)}

    @staticmethod
    def exists(lucene_path: Path) -> bool:
        return (Path(lucene_path) / DIRECTORY / "meta.json").is_file()

    def get(self, doc_ids: Iterable[str]) -> dict[str, Document]:
        """Title and text of each of ``doc_ids`` the index holds (the others are left out, as Lucene does)."""
        rows = [(d, self.rows[d]) for d in dict.fromkeys(doc_ids) if d in self.rows]
        if not rows:
            return {}
        at = np.asarray([r for _, r in rows], dtype=np.int64) * 2
        starts, middles, ends = (self.offsets[at + j].tolist() for j in range(3))
        data = self._data
        return {d: Document(d, data[s:m].decode("utf-8"), data[m:e].decode("utf-8"))
                for (d, _), s, m, e in zip(rows, starts, middles, ends)}
