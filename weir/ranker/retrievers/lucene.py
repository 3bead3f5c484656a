"""Lucene reached through pyjnius: Anserini's analyzer (the terms a BM25 index holds for a text, used to turn a query
into terms), Lucene similarities, and top-k search by Lucene itself.

weir's first stages score in process (:mod:`weir.ranker.retrievers.inverted`); the searchers here are Lucene's own
answer, kept as the reference those stages are checked against (tests, ``bench/sparse_throughput.py``) and for
training code that searches a throwaway index. A query is built exactly as Anserini builds it
(``DefaultEnglishAnalyzer`` + ``BagOfWordsQueryGenerator`` for BM25 over text; a boolean query of weighted term
queries for the pretokenized learned-weight indexes), searched with Anserini's tie-breaking sort (score, then
docid), and Lucene's doc numbers are mapped to collection ids through the table written at index time
(:mod:`weir.indexer.lucene`). The BM25 hits are identical to pyserini's, rank for rank.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from weir.indexer.lucene import open_reader, read_docid_table
from weir.core import jvm


def bm25_similarity(k1: float, b: float):
    """Lucene's ``BM25Similarity(k1, b)``."""
    return jvm.autoclass("org.apache.lucene.search.similarities.BM25Similarity")(float(k1), float(b))


def english_analyzer():
    """Anserini's default English analyzer (lowercase, stopwords, Porter): the BM25 index's."""
    return jvm.autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()


def bag_of_words():
    """Anserini's query generator for BM25 over text: one SHOULD term query per analyzed query term."""
    return jvm.autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()


class EnglishAnalyzer:
    """Anserini's default English analyzer, run in Java: the terms of a text as the BM25 index holds them.

    A call through pyjnius costs far more than analyzing a query, and converting a Java list element by element more
    again: a text's terms come back as one string (``List.toString()``: ``[t1, t2]``; a term never holds a space),
    and a batch of texts is analyzed in one call, joined by a separator word whose term then splits the result
    (the analyzer is per token, so joining texts on whitespace changes no term). A batch whose texts hold the
    separator word themselves is analyzed text by text."""

    SEPARATOR = "weirqueryseparator"

    @jvm.serialized
    def __init__(self):
        self.analyzer = english_analyzer()
        self._analyze = jvm.autoclass("io.anserini.analysis.AnalyzerUtils").analyze
        separator = self.analyze(self.SEPARATOR)
        self._separator = separator[0] if len(separator) == 1 else None

    @jvm.serialized
    def analyze(self, text: str) -> list[str]:
        if not text:
            return []
        listed = self._analyze(self.analyzer, text).toString()
        return listed[1:-1].split(", ") if len(listed) > 2 else []

    @jvm.serialized
    def analyze_many(self, texts: Sequence[str]) -> list[list[str]]:
        if len(texts) < 2 or self._separator is None:
            return [self.analyze(t) for t in texts]
        out: list[list[str]] = [[]]
        separator = self._separator
        for term in self.analyze(f"\n{self.SEPARATOR}\n".join(texts)):
            if term == separator:
                out.append([])
            else:
                out[-1].append(term)
        if len(out) != len(texts):  # a text held the separator word
            return [self.analyze(t) for t in texts]
        return out


class LuceneReader:
    """One Lucene index opened for search: the reader, an ``IndexSearcher`` scoring with ``similarity``, and the
    collection id of each Lucene doc number."""

    @jvm.serialized
    def __init__(self, path: str | os.PathLike, similarity):
        self.path = Path(path)
        self.reader = open_reader(self.path)
        self.searcher = jvm.autoclass("org.apache.lucene.search.IndexSearcher")(self.reader)
        self.searcher.setSimilarity(similarity)
        self.docids = read_docid_table(self.path, self.reader)

    @jvm.serialized
    def close(self) -> None:
        self.reader.close()


class LuceneSearcher(LuceneReader):
    """Top-k search over one Lucene index with a given similarity; subclasses turn a query (text, weighted terms
    ...) into a Lucene query. Safe from any thread: Java is reached under :data:`weir.core.jvm.lock`, one query after
    another (see :mod:`weir.core.jvm` for why not from several threads at once)."""

    @jvm.serialized
    def __init__(self, path: str | os.PathLike, similarity, *, field: str = "contents"):
        super().__init__(path, similarity)
        SortField = jvm.autoclass("org.apache.lucene.search.SortField")
        string_val = jvm.autoclass("org.apache.lucene.search.SortField$Type").STRING_VAL
        self.sort = jvm.autoclass("org.apache.lucene.search.Sort")(SortField.FIELD_SCORE, SortField("id", string_val))
        self.field = field

    def lucene_query(self, query):
        """The Lucene query for ``query``, or None when it has no term to search."""
        raise NotImplementedError

    @jvm.serialized
    def search(self, query, k: int) -> list[tuple[str, float]]:
        lucene_query = self.lucene_query(query)
        if lucene_query is None:
            return []
        top = self.searcher.search(lucene_query, int(k), self.sort, True)
        docids = self.docids
        return [(docids[sd.doc], sd.score) for sd in top.scoreDocs]

    @jvm.serialized
    def search_many(self, queries: Sequence, k: int) -> list[list[tuple[str, float]]]:
        return [self.search(q, k) for q in queries]


class LuceneBM25Searcher(LuceneSearcher):
    """BM25 over query text, analyzed and built into a bag-of-words query exactly as Anserini does."""

    @jvm.serialized
    def __init__(self, path: str | os.PathLike, *, k1: float = 0.9, b: float = 0.4, field: str = "contents"):
        super().__init__(path, bm25_similarity(k1, b), field=field)
        self.analyzer = english_analyzer()
        self.generator = bag_of_words()

    def lucene_query(self, text: str):
        return self.generator.buildQuery(self.field, self.analyzer, text)


class LuceneTermSearcher(LuceneSearcher):
    """Top-k search of weighted term queries ({term: weight}) over a pretokenized Lucene index (thread-safe)."""

    @jvm.serialized
    def __init__(self, path: str | os.PathLike, similarity, *, field: str = "contents"):
        super().__init__(path, similarity, field=field)
        self._builder = jvm.autoclass("org.apache.lucene.search.BooleanQuery$Builder")
        self._should = jvm.autoclass("org.apache.lucene.search.BooleanClause$Occur").SHOULD
        self._term_query = jvm.autoclass("org.apache.lucene.search.TermQuery")
        self._term = jvm.autoclass("org.apache.lucene.index.Term")
        self._boost = jvm.autoclass("org.apache.lucene.search.BoostQuery")

    def lucene_query(self, weights: dict[str, float]):
        if not weights:
            return None
        builder = self._builder()
        for term, w in weights.items():
            q = self._term_query(self._term(self.field, term))
            builder.add(q if w == 1 else self._boost(q, float(w)), self._should)
        return builder.build()
