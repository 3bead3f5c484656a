"""Lucene indexes through pyserini: the BM25 index (raw documents stored, BEIR "flat" contents)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from weir import jvm
from ranker.lucene_search import write_docid_table
from weir.types import Document, batched

jvm.ensure()
from pyserini.index.lucene import LuceneIndexer  # noqa: E402

BATCH = 2000


def build_bm25(documents: Iterable[Document], out: Path, *, threads: int | None = None) -> dict:
    """Index ``documents`` into a Lucene index at ``out``: field ``contents`` = title + " " + text (what BM25 scores),
    field ``title`` (for field-level features), raw JSON stored (for titles and texts at search time), positions and
    document vectors stored (for proximity features and feedback)."""
    threads = threads or max(1, os.cpu_count() or 1)
    indexer = LuceneIndexer(
        args=["-index", str(out), "-storeRaw", "-storePositions", "-storeDocvectors"], threads=threads
    )
    count = 0
    try:
        for batch in batched(documents, BATCH):
            indexer.add_batch_raw(
                [json.dumps({"id": d.id, "contents": d.contents, "title": d.title}, ensure_ascii=False) for d in batch]
            )
            count += len(batch)
    finally:
        indexer.close()
    write_docid_table(out)
    return {
        "type": "lucene-bm25",
        "documents": count,
        "parameters": {"contents": "title + ' ' + text (BEIR flat)", "stored": ["raw", "positions", "docvectors"],
                       "docid_table": "docids.txt",
                       "analyzer": "Anserini default (English, Porter stemming, stopwords)"},
    }
