"""Direct Lucene search through pyjnius: BM25 top-k over an Anserini index, without loading stored documents.

pyserini's ``LuceneSearcher.batch_search`` loads every hit's stored document (raw text included) inside Anserini
before handing back ``ScoredDoc`` objects; a first stage needs only (docid, score). Here the query is built exactly
as Anserini builds it (``DefaultEnglishAnalyzer`` + ``BagOfWordsQueryGenerator``), searched with Anserini's
tie-breaking sort (score, then docid), and Lucene's internal doc numbers are mapped to collection ids through a table
written at index time (``docids.txt``). The hits are identical to pyserini's, rank for rank.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from weir import jvm

DOCIDS = "docids.txt"


def _java():
    jvm.ensure()
    from jnius import autoclass, cast

    return autoclass, cast


def open_reader(path: Path):
    autoclass, cast = _java()
    FSDirectory = autoclass("org.apache.lucene.store.FSDirectory")
    DirectoryReader = autoclass("org.apache.lucene.index.DirectoryReader")
    Paths = autoclass("java.nio.file.Paths")
    return cast("org.apache.lucene.index.IndexReader", DirectoryReader.open(FSDirectory.open(Paths.get(str(path)))))


def write_docid_table(path: Path) -> int:
    """Write ``docids.txt`` (collection id of each Lucene doc number, one per line) beside a finished index."""
    reader = open_reader(path)
    try:
        stored = reader.storedFields()
        with open(path / DOCIDS, "w", encoding="utf-8") as f:
            for i in range(reader.maxDoc()):
                f.write(stored.document(i).get("id") + "\n")
        return reader.maxDoc()
    finally:
        reader.close()


class LuceneSearcher:
    """Thread-safe top-k search over one Lucene index with a given similarity; subclasses turn a query (text,
    weighted terms ...) into a Lucene query. ``search_many`` runs queries on a thread pool."""

    def __init__(self, path: str | os.PathLike, similarity, *, field: str = "contents", threads: int | None = None):
        autoclass, _ = _java()
        self.path = Path(path)
        self.reader = open_reader(self.path)
        self.searcher = autoclass("org.apache.lucene.search.IndexSearcher")(self.reader)
        self.searcher.setSimilarity(similarity)
        SortField = autoclass("org.apache.lucene.search.SortField")
        string_val = autoclass("org.apache.lucene.search.SortField$Type").STRING_VAL
        self.sort = autoclass("org.apache.lucene.search.Sort")(SortField.FIELD_SCORE, SortField("id", string_val))
        self.field = field
        self.docids = self._docids()
        self.pool = ThreadPoolExecutor(max_workers=threads or max(1, os.cpu_count() or 1),
                                       thread_name_prefix="weir-lucene")

    def lucene_query(self, query):
        """The Lucene query for ``query``, or None when it has no term to search."""
        raise NotImplementedError

    def _docids(self) -> list[str]:
        table = self.path / DOCIDS
        if not table.is_file():  # an index built by another tool: read the ids once from the stored fields
            stored = self.reader.storedFields()
            return [stored.document(i).get("id") for i in range(self.reader.maxDoc())]
        with open(table, encoding="utf-8") as f:
            return f.read().splitlines()

    def search(self, query, k: int) -> list[tuple[str, float]]:
        lucene_query = self.lucene_query(query)
        if lucene_query is None:
            return []
        top = self.searcher.search(lucene_query, int(k), self.sort, True)
        docids = self.docids
        return [(docids[sd.doc], sd.score) for sd in top.scoreDocs]

    def search_many(self, queries: Sequence, k: int) -> list[list[tuple[str, float]]]:
        if len(queries) == 1:
            return [self.search(queries[0], k)]
        return list(self.pool.map(lambda q: self.search(q, k), queries))

    def close(self) -> None:
        self.pool.shutdown(wait=False)
        self.reader.close()


class LuceneBM25Searcher(LuceneSearcher):
    """BM25 over query text, analyzed and built into a bag-of-words query exactly as Anserini does."""

    def __init__(self, path: str | os.PathLike, *, k1: float = 0.9, b: float = 0.4, field: str = "contents",
                 threads: int | None = None):
        autoclass, _ = _java()
        similarity = autoclass("org.apache.lucene.search.similarities.BM25Similarity")(float(k1), float(b))
        super().__init__(path, similarity, field=field, threads=threads)
        self.analyzer = autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
        self.generator = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()

    def lucene_query(self, text: str):
        return self.generator.buildQuery(self.field, self.analyzer, text)
