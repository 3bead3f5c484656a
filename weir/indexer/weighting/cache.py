"""On-disk cache of a frozen backbone's term vectors for a corpus (the expensive encoder pass, done once).

Training a head on a frozen backbone, and indexing with several heads over that backbone, need the same term
vectors (:meth:`weir.indexer.weighting.model.Backbone.term_vectors`). They are stored once per (backbone weights,
max_length, tokenization version, exact documents) under ``$WEIR_CACHE`` (default ``~/.cache/weir``) in
``termvectors/<key>/``: ``vectors.npy`` (float16, all terms of all documents), ``offsets.npy``, ``terms.json`` and
``docids.json``. The key hashes every document's id and text, so an edited corpus never reads stale vectors.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from weir.core.inference import EXACT
from weir.core.runtime import cache_dir
from weir.core.types import Document

TOKENIZATION_VERSION = "words-anserini-en-1"
CHUNK = 256


def cache_root() -> Path:
    return cache_dir("termvectors")


def cache_key(backbone, docs: Sequence[Document]) -> str:
    h = hashlib.sha256()
    d = backbone.describe()
    key = [d["base_model_sha256"] or d["base_model"], d["max_length"], TOKENIZATION_VERSION]
    if d.get("input", "words") != "words":  # the words input keeps the keys of the caches made before there was a choice
        key.append(d["input"])
    if d.get("backend", "torch") not in EXACT:  # vectors of the exact backends are the same; others have their own
        key += [d["backend"], d.get("recipe")]
    h.update(json.dumps(key).encode())
    for doc in docs:
        h.update(doc.id.encode() + b"\0" + doc.contents.encode() + b"\1")
    return h.hexdigest()[:24]


class TermVectors:
    """Term vectors of a corpus: ``terms[i]`` and ``vectors(i)`` (float16 (n_terms, dim)) of document ``docids[i]``."""

    def __init__(self, docids: list[str], terms: list[list[str]], offsets: np.ndarray, data: np.ndarray):
        self.docids, self.terms, self.offsets, self.data = docids, terms, offsets, data
        self.index = {d: i for i, d in enumerate(docids)}

    def vectors(self, i: int) -> np.ndarray:
        return self.data[self.offsets[i]:self.offsets[i + 1]]

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        np.save(tmp / "vectors.npy", self.data)
        np.save(tmp / "offsets.npy", self.offsets)
        (tmp / "terms.json").write_text(json.dumps(self.terms, ensure_ascii=False), encoding="utf-8")
        (tmp / "docids.json").write_text(json.dumps(self.docids, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> TermVectors:
        return cls(json.loads((path / "docids.json").read_text(encoding="utf-8")),
                   json.loads((path / "terms.json").read_text(encoding="utf-8")),
                   np.load(path / "offsets.npy"), np.load(path / "vectors.npy", mmap_mode="r"))


def encode(backbone, docs: Sequence[Document], desc: str = "term vectors") -> TermVectors:
    """Run the backbone over ``docs`` (batched, progress bar with passages/s)."""
    terms: list[list[str]] = []
    parts: list[np.ndarray] = []
    with tqdm(total=len(docs), desc=desc, unit="doc", dynamic_ncols=True, mininterval=2.0) as bar:
        for start in range(0, len(docs), CHUNK):
            batch = docs[start:start + CHUNK]
            for t, v in backbone.term_vectors([d.contents for d in batch]):
                terms.append(t)
                parts.append(v.astype(np.float16))
            bar.update(len(batch))
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(t) for t in terms])
    data = np.concatenate(parts) if parts else np.zeros((0, backbone.dim), dtype=np.float16)
    return TermVectors([d.id for d in docs], terms, offsets, data)


def cached_term_vectors(backbone, docs: Sequence[Document], *, write: bool = True, desc: str = "term vectors",
                        log=print) -> TermVectors:
    """The cached vectors of ``docs`` when present, else encode them (and store them when ``write``)."""
    path = cache_root() / cache_key(backbone, docs)
    if (path / "docids.json").is_file():
        log(f"term vectors from cache {path}")
        return TermVectors.load(path)
    tv = encode(backbone, docs, desc)
    if write:
        path.parent.mkdir(parents=True, exist_ok=True)
        tv.save(path)
    return tv
