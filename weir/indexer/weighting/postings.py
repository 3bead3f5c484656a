"""The postings arrays of the components weir weights itself (``deepct``, ``deepimpact``), written from the weighted
term stream that Lucene indexed, instead of read back from Lucene through Java a posting at a time
(:func:`weir.indexer.postings.export`): issue 51's build that streams. SciFact's and ArguAna's components (513k and
729k postings) took 0.21-0.36 s, the export of the same components 0.96-2.47 s (two runs, the same stream). The
arrays are the export's, bit for bit (tested against it), and each build checks them against Lucene's own statistics
of the field. The postings are gathered in memory as numbers (12 bytes each, each term once), then sorted by term and
document.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from weir.core import jvm
from weir.core.strings import StringTable
from weir.indexer.lucene import open_reader
from weir.indexer.postings import DIRECTORY, FIELD, LENGTH_TABLE, Postings, docid_table, smallest_unsigned


@jvm.serialized
def _lucene_statistics(lucene_path: Path, field: str) -> tuple[int, int, int]:
    """Lucene's document count, postings and term frequencies of ``field``: four calls, not one a posting."""
    reader = open_reader(Path(lucene_path))
    try:
        terms = jvm.autoclass("org.apache.lucene.index.MultiTerms").getTerms(reader, field)
        return int(terms.getDocCount()), int(terms.getSumDocFreq()), int(terms.getSumTotalTermFreq())
    finally:
        reader.close()


class StreamedPostings:
    """The postings of a component weir weights itself, gathered from its documents as they are handed to Lucene
    (:meth:`add`, once per document, with the frequencies Lucene is given), then written as the arrays
    :func:`weir.indexer.postings.export` would read back from Lucene (:meth:`write`), checked against Lucene's
    statistics of the field."""

    def __init__(self):
        self.ids: dict[str, int] = {}  # term -> its number in the order first met
        self.docids: list[str] = []  # the documents with a term, in the stream's order
        self.terms, self.docs, self.freqs = array("i"), array("i"), array("i")

    def __len__(self) -> int:
        """The postings gathered."""
        return len(self.freqs)

    def add(self, docid: str, terms: list[str], counts: np.ndarray) -> None:
        """One document's terms and frequencies (those below 1 left out, as Lucene is given them)."""
        counts = np.asarray(counts)
        kept = np.flatnonzero(counts >= 1)
        if len(kept):
            self.terms.extend([self.ids.setdefault(terms[i], len(self.ids)) for i in kept])
            self.docs.extend([len(self.docids)] * len(kept))
            self.freqs.extend(counts[kept].tolist())
            self.docids.append(docid)

    def write(self, lucene_path: Path, field: str = FIELD) -> dict:
        """Store the arrays in ``<lucene_path>/postings`` once Lucene has indexed the stream: its doc numbers from its
        docid table; norms its one-byte lengths (``SmallFloat.intToByte4``: the largest byte whose
        :data:`LENGTH_TABLE` length is at most the document's); refused (RuntimeError) unless the documents, postings
        and frequencies are Lucene's count of them. Returns what the manifest records."""
        start = time.perf_counter()
        docids = docid_table(Path(lucene_path))
        number = {d: i for i, d in enumerate(docids)}
        lucene_of = np.array([number[d] for d in self.docids], dtype=np.int32)
        vocabulary = sorted(self.ids)  # code point order is UTF-8 byte order, Lucene's term order
        rank = np.empty(len(self.ids), dtype=np.int64)
        rank[[self.ids[t] for t in vocabulary]] = np.arange(len(vocabulary))
        term_of = rank[np.frombuffer(self.terms, dtype=np.int32)]
        docs = lucene_of[np.frombuffer(self.docs, dtype=np.int32)]
        freqs = np.frombuffer(self.freqs, dtype=np.int32)
        # one key a (term, document): a term written twice in a document adds up, as Lucene adds its repeats
        pairs, at = np.unique(term_of << 32 | docs, return_inverse=True)
        summed = np.bincount(at, weights=freqs, minlength=len(pairs)).astype(np.int64)
        lengths = np.bincount(docs, weights=freqs, minlength=len(docids)).astype(np.int64)
        norms = (np.searchsorted(LENGTH_TABLE, lengths, side="right") - 1).astype(np.uint8)
        offsets = np.zeros(len(vocabulary) + 1, dtype=np.int64)
        np.cumsum(np.bincount(pairs >> 32, minlength=len(vocabulary)), out=offsets[1:])
        postings = Postings(field, StringTable.of(vocabulary, sorted=True), offsets,
                            (pairs & 0xFFFFFFFF).astype(np.int32), smallest_unsigned(summed), norms, len(docids),
                            int((lengths > 0).sum()), int(lengths.sum()), docids, len(docids))
        ours = (postings.doc_count, len(postings.docs), postings.sum_total_term_freq)
        lucene = _lucene_statistics(Path(lucene_path), field)
        if lucene != ours:
            raise RuntimeError(f"{lucene_path}: the postings of the weighted stream (documents, postings, frequencies "
                               f"{ours}) are not Lucene's {lucene}")
        seconds = time.perf_counter() - start
        postings.write(Path(lucene_path) / DIRECTORY, Path(lucene_path), seconds)
        return {"directory": DIRECTORY, "terms": len(postings.terms), "postings": len(postings.docs),
                "seconds": round(seconds, 2), "from": "the weighted term stream, checked against Lucene's statistics"}
