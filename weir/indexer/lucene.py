"""Lucene indexes through pyserini: the BM25 index (raw documents stored, BEIR "flat" contents), pretokenized
indexes of learned term weights, and the reading side every Lucene component shares: the index reader and the table
of collection ids by Lucene doc number (``docids.txt``), written beside each index when it is built."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from weir.core import jvm
from weir.core.types import Document, batched

BATCH = 2000
DOCIDS = "docids.txt"


def _indexer(out: Path, args: list[str], threads: int):
    jvm.ensure()
    from pyserini.index.lucene import LuceneIndexer

    return LuceneIndexer(args=["-index", str(out), *args], threads=threads)


@jvm.serialized
def build_bm25(documents: Iterable[Document], out: Path, *, threads: int | None = None) -> dict:
    """Index ``documents`` into a Lucene index at ``out``: field ``contents`` = title + " " + text (what BM25 scores),
    field ``title`` (for field-level features), raw JSON stored (for titles and texts at search time), positions and
    document vectors stored (for proximity features and feedback)."""
    threads = threads or max(1, os.cpu_count() or 1)
    indexer = _indexer(out, ["-storeRaw", "-storePositions", "-storeDocvectors"], threads)
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
                       "docid_table": DOCIDS,
                       "analyzer": "Anserini default (English, Porter stemming, stopwords)"},
    }


@jvm.serialized
def index_pretokenized(out: Path, contents: Iterable[tuple[str, str]], args: list[str],
                       threads: int | None) -> tuple[int, int]:
    """Index (docid, whitespace-separated terms) pairs with ``-pretokenized`` (plus ``args``, e.g. ``-impact``); a
    document without terms is left out. Returns (documents indexed, documents left out). ``threads`` (default: all
    cores) index batches in parallel: Lucene's document order may then differ from the stream's, which no search
    sees (``docids.txt`` maps the order, and ties are broken by collection id)."""
    indexer = _indexer(out, ["-pretokenized", *args], threads or max(1, os.cpu_count() or 1))
    empty = 0
    try:
        for batch in batched(contents, BATCH):
            kept = [json.dumps({"id": d, "contents": c}, ensure_ascii=False) for d, c in batch if c]
            empty += len(batch) - len(kept)
            if kept:
                indexer.add_batch_raw(kept)
    finally:
        indexer.close()
    return write_docid_table(out), empty


@jvm.serialized
def open_reader(path: Path):
    """A Lucene ``IndexReader`` over the index at ``path``."""
    directory = jvm.autoclass("org.apache.lucene.store.FSDirectory").open(
        jvm.autoclass("java.nio.file.Paths").get(str(path)))
    return jvm.cast("org.apache.lucene.index.IndexReader",
                    jvm.autoclass("org.apache.lucene.index.DirectoryReader").open(directory))


def _stored_ids(reader) -> list[str]:
    return list(_each_stored_id(reader))


def _each_stored_id(reader) -> Iterator[str]:
    """The stored ``id`` of each doc number, in order, read one at a time (the caller holds the JVM lock)."""
    stored = reader.storedFields()
    for i in range(reader.maxDoc()):
        yield stored.document(i).get("id")


@jvm.serialized
def write_docid_table(path: Path) -> int:
    """Write ``docids.txt`` (collection id of each Lucene doc number, one per line) beside a finished index."""
    reader = open_reader(path)
    try:
        with open(path / DOCIDS, "w", encoding="utf-8") as f:
            f.writelines(docid + "\n" for docid in _each_stored_id(reader))  # written as read: no list of all
        return reader.maxDoc()
    finally:
        reader.close()


def read_docid_table(path: Path, reader=None) -> list[str]:
    """The collection id of each Lucene doc number: ``docids.txt``, or for an index built by another tool, the
    stored ``id`` fields read once (through ``reader`` when given)."""
    table = Path(path) / DOCIDS
    if table.is_file():
        with open(table, encoding="utf-8") as f:
            return f.read().splitlines()
    with jvm.lock:
        if reader is not None:
            return _stored_ids(reader)
        reader = open_reader(Path(path))
        try:
            return _stored_ids(reader)
        finally:
            reader.close()
