"""The postings arrays of the components weir weights itself (``deepct``, ``deepimpact``), written from the weighted
term stream that Lucene indexed, instead of read back from Lucene through Java a posting at a time
(:func:`weir.indexer.postings.export`): issue 51's build that streams. SciFact's and ArguAna's components (513k and
729k postings) took 0.21-0.28 s, the export of the same components 0.96-1.96 s. The arrays are the export's, bit for
bit (tested against it), and each build checks them against Lucene's own statistics of the field. The postings are
gathered in memory as numbers (12 bytes each, each term once), then sorted by term and document.
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


def write_streamed_postings(lucene_path: Path, documents: Iterable[tuple[str, list[str], np.ndarray]],
                            field: str = FIELD) -> dict:
    """Store in ``<lucene_path>/postings`` the postings of a component weir weighted itself and Lucene indexed
    ``-pretokenized`` from the same stream, ``documents`` being (id, terms, frequencies; those below 1 left out, as
    Lucene was given them): the arrays :func:`export` would read back through Java a posting at a time, built
    from the stream instead. Lucene's doc numbers come from its docid table; norms are Lucene's one-byte
    lengths (``SmallFloat.intToByte4``: the largest byte whose :data:`LENGTH_TABLE` length is at most the document's);
    the whole is checked against Lucene's statistics of the field (documents, postings, frequencies). Returns what the
    manifest records."""
    start = time.perf_counter()
    docids = docid_table(Path(lucene_path))
    number = {d: i for i, d in enumerate(docids)}
    ids: dict[str, int] = {}  # term -> its number in the order first met
    terms, docs, freqs = array("i"), array("i"), array("i")
    for docid, doc_terms, counts in documents:
        counts = np.asarray(counts, dtype=np.int64)
        kept = np.flatnonzero(counts >= 1)
        if len(kept):
            terms.extend([ids.setdefault(doc_terms[i], len(ids)) for i in kept])
            docs.extend([number[docid]] * len(kept))
            freqs.extend(counts[kept].tolist())
    vocabulary = sorted(ids)  # code point order is UTF-8 byte order, Lucene's term order
    rank = np.empty(len(ids), dtype=np.int64)
    rank[[ids[t] for t in vocabulary]] = np.arange(len(vocabulary))
    term_of = rank[np.frombuffer(terms, dtype=np.int32)]
    docs_np, freqs_np = np.frombuffer(docs, dtype=np.int32), np.frombuffer(freqs, dtype=np.int32)
    # one key a (term, document): a term written twice in a document adds up, as Lucene adds its repeats
    pairs, at = np.unique(term_of << 32 | docs_np, return_inverse=True)
    summed = np.bincount(at, weights=freqs_np, minlength=len(pairs)).astype(np.int64)
    lengths = np.bincount(docs_np, weights=freqs_np, minlength=len(docids)).astype(np.int64)
    norms = (np.searchsorted(LENGTH_TABLE, lengths, side="right") - 1).astype(np.uint8)
    offsets = np.zeros(len(vocabulary) + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs >> 32, minlength=len(vocabulary)), out=offsets[1:])
    postings = Postings(field, StringTable.of(vocabulary, sorted=True), offsets,
                        (pairs & 0xFFFFFFFF).astype(np.int32), smallest_unsigned(summed), norms, len(docids),
                        int((lengths > 0).sum()), int(lengths.sum()), docids, len(docids))
    lucene = _lucene_statistics(Path(lucene_path), field)
    if lucene != (postings.doc_count, len(postings.docs), postings.sum_total_term_freq):
        raise RuntimeError(f"{lucene_path}: the postings of the weighted stream (documents, postings, frequencies "
                           f"{postings.doc_count, len(postings.docs), postings.sum_total_term_freq}) are not "
                           f"Lucene's {lucene}")
    seconds = time.perf_counter() - start
    postings.write(Path(lucene_path) / DIRECTORY, Path(lucene_path), seconds)
    return {"directory": DIRECTORY, "terms": len(postings.terms), "postings": len(postings.docs),
            "seconds": round(seconds, 2), "from": "the weighted term stream, checked against Lucene's statistics"}
