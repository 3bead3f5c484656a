"""An opened index directory: its manifest, verified components, and the searchers over them (opened once)."""

from __future__ import annotations

import json
import os
import threading
from functools import cached_property
from pathlib import Path

from indexer.index_dir import read_manifest, verify
from weir.types import Document, InputError


class Index:
    """Open an index directory built by ``weir index build``. ``verify=True`` checks every component's checksum."""

    def __init__(self, path: str | os.PathLike, *, verify_checksums: bool = False):
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        if verify_checksums:
            verify(self.path, self.manifest)
        self._lock = threading.Lock()

    @property
    def components(self) -> list[str]:
        return list(self.manifest["components"])

    def component_path(self, name: str) -> Path:
        if name not in self.manifest["components"]:
            raise InputError(
                f"{self.path}: this index has no {name!r} component (it has: {', '.join(self.components)}); "
                f"rebuild it with `weir index build --with {name}`"
            )
        return self.path / self.manifest["components"][name]["path"]

    @cached_property
    def lucene(self):
        """The pyserini searcher over the BM25 index (also the store of raw documents)."""
        from weir import jvm

        jvm.ensure()
        from pyserini.search.lucene import LuceneSearcher

        with self._lock:
            return LuceneSearcher(str(self.component_path("bm25")))

    def documents(self, doc_ids: list[str], threads: int = 4) -> dict[str, Document]:
        """Title and text of the given documents, from the raw documents stored in the BM25 index."""
        found = self.lucene.batch_doc(list(dict.fromkeys(doc_ids)), threads)
        out = {}
        for doc_id, doc in found.items():
            raw = json.loads(doc.raw())
            title, contents = raw.get("title", ""), raw.get("contents", "")
            text = contents[len(title) + 1:] if title and contents.startswith(title) else contents
            out[doc_id] = Document(doc_id, title, text)
        return out

    @property
    def num_docs(self) -> int:
        return self.manifest["counts"]["documents"]
