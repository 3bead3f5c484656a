"""The postings of one Lucene field as flat arrays, exported once from the index, for in-process scoring.

A first stage that asks Lucene for every query pays the Java bridge per hit, and Java can be reached from one
Python thread at a time (:mod:`weir.core.jvm`). Everything Lucene's BM25 and impact similarities read is small and
static: per term its postings (doc number, frequency), per document its length norm (one byte), and two collection
statistics. Read once into arrays, they let :mod:`weir.ranker.retrievers.inverted` compute Lucene's scores bit for bit
in numpy, with Java out of the query path. No library reads a Lucene index into arrays: pyserini's ``IndexReader``
walks postings through the same bridge, one call per posting, which is what the export below does, once.

The arrays are written beside the Lucene files of a component when the index is built (``<component>/postings/``,
so the component's checksum covers them):

- ``terms.txt``: the field's terms in Lucene's order (UTF-8 byte order), one per line;
- ``offsets.npy`` (int64, terms + 1): term ``t`` owns postings ``offsets[t]:offsets[t + 1]``;
- ``docs.npy`` (int32): Lucene doc numbers (global over segments), ascending within a term;
- ``freqs.npy`` (the smallest unsigned type that holds them): term frequencies (quantized impacts in an impact index);
- ``norms.npy`` (uint8, one per Lucene doc): the length norm Lucene stored (absent when the field omits norms);
- ``meta.json``: field, counts, the collection statistics Lucene's similarities use (docCount, sumTotalTermFreq),
  and the sha256 of the Lucene commit (``segments_N``) they were read from, checked at every load.

When read, the arrays are memory-mapped (``np.load(mmap_mode="r")``) and the terms and the component's collection
ids are string tables over their files (:mod:`weir.core.strings`): an opened component costs little anonymous memory
(an 8.8M-passage BM25 component about 0.4 GB, its 1.7 GB of postings in the page cache, shared by every process that
serves the index) and opens in seconds.

The export reads Lucene's segments one at a time, writes each one's postings to a spill file as it ends, then places
every segment's postings at their term's place straight into ``docs.npy`` and ``freqs.npy`` (memory-mapped, written
through the page cache): no sort, and memory holds one segment's postings, not the field's (8.8M synthetic passages,
the export alone, one after the other: peak RSS 3.8 GiB against 6.0 merged in memory, 282 s against 267, the same
files).

An index built before this module existed has no ``postings/``: it is exported in memory when opened (a few
seconds per 100k documents), with a warning; ``weir index upgrade`` stores the arrays in place.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import time
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from weir.indexer.lucene import DOCIDS, open_reader, read_docid_table
from weir.core import jvm
from weir.core.strings import StringTable

log = logging.getLogger(__name__)

DIRECTORY = "postings"
FORMAT = 1
MERGE_RUN = 1 << 22  # postings placed at a time when segments are merged (their places: 32 MiB of int64)
FIELD = "contents"


def _length_table() -> np.ndarray:
    """Lucene's ``SmallFloat.byte4ToInt`` for every norm byte: the document length each norm stands for (what
    ``BM25Similarity.LENGTH_TABLE`` holds). A port of ten lines, checked against Java in the tests."""
    max_int4 = 231  # SmallFloat.longToInt4(Integer.MAX_VALUE)
    free = 255 - max_int4  # NUM_FREE_VALUES: small lengths are stored as they are
    table = np.empty(256, dtype=np.int64)
    for byte in range(256):
        if byte < free:
            table[byte] = byte
            continue
        i = byte - free
        bits, shift = i & 0x07, (i >> 3) - 1
        decoded = bits if shift == -1 else (bits | 0x08) << shift
        table[byte] = min(free + decoded, 2**31 - 1)
    return table


LENGTH_TABLE = _length_table()


def commit_digest(path: Path) -> tuple[str, str]:
    """(name, sha256) of the Lucene commit point of the index at ``path``: the ``segments_N`` with the highest
    generation, which changes whenever the index does."""
    commits = [p for p in Path(path).glob("segments_*") if p.name != "segments.gen"]
    if not commits:
        raise FileNotFoundError(f"{path} is not a Lucene index (no segments_N file)")
    latest = max(commits, key=lambda p: int(p.name.split("_", 1)[1], 36))
    return latest.name, hashlib.sha256(latest.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Postings:
    """The postings, norms and collection statistics of one field (see the module docstring for each array)."""

    field: str
    terms: StringTable  # sorted (Lucene's order: UTF-8 bytes)
    offsets: np.ndarray
    docs: np.ndarray
    freqs: np.ndarray
    norms: np.ndarray | None
    max_doc: int
    doc_count: int
    sum_total_term_freq: int
    docids: StringTable  # the collection id of each Lucene doc number (the component's docids.txt)
    # an index with deleted documents (one written by another tool): the postings leave them out, but Lucene's
    # statistics count them, so its document frequencies are kept apart, and the live documents counted
    num_docs: int | None = None
    lucene_doc_freqs: np.ndarray | None = None
    # what readers derive from these arrays (a similarity's precomputed scores), kept as long as the arrays are
    derived: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):  # lists of strings (postings made in memory) become tables
        if not isinstance(self.terms, StringTable):
            object.__setattr__(self, "terms", StringTable.of(self.terms, sorted=True))
        if not isinstance(self.docids, StringTable):
            object.__setattr__(self, "docids", StringTable.of(self.docids))

    @property
    def doc_freqs(self) -> np.ndarray:
        """Each term's document frequency as Lucene's statistics give it (deleted documents included)."""
        return self.lucene_doc_freqs if self.lucene_doc_freqs is not None else np.diff(self.offsets)

    @property
    def live_docs(self) -> int:
        return self.max_doc if self.num_docs is None else self.num_docs

    @property
    def nbytes(self) -> int:
        arrays = (self.offsets, self.docs, self.freqs) + ((self.norms,) if self.norms is not None else ())
        return sum(a.nbytes for a in arrays)

    def write(self, directory: Path, lucene_path: Path, seconds: float) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        np.save(directory / "offsets.npy", self.offsets)
        for name, values in (("docs", self.docs), ("freqs", self.freqs)):
            if isinstance(values, np.memmap) and Path(values.filename) == (directory / f"{name}.npy").resolve():
                values.flush()  # written in place by the export
            else:
                np.save(directory / f"{name}.npy", values)
        if self.norms is not None:
            np.save(directory / "norms.npy", self.norms)
        if self.lucene_doc_freqs is not None:
            np.save(directory / "lucene_doc_freqs.npy", self.lucene_doc_freqs)
        (directory / "terms.txt").write_bytes(self.terms.buffer.tobytes())
        name, digest = commit_digest(lucene_path)
        meta = {"format": FORMAT, "field": self.field, "terms": len(self.terms), "postings": len(self.docs),
                "max_doc": self.max_doc, "doc_count": self.doc_count,
                "sum_total_term_freq": self.sum_total_term_freq, "norms": self.norms is not None,
                "num_docs": self.live_docs, "deleted_documents": self.lucene_doc_freqs is not None,
                "freq_dtype": str(self.freqs.dtype), "lucene_commit": {"file": name, "sha256": digest},
                "export_seconds": round(seconds, 2)}
        (directory / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, directory: Path, lucene_path: Path) -> Postings:
        meta = json.loads((directory / "meta.json").read_text(encoding="utf-8"))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{directory}: postings format {meta.get('format')}, this weir reads {FORMAT}")
        name, digest = commit_digest(lucene_path)
        if meta["lucene_commit"] != {"file": name, "sha256": digest}:
            raise ValueError(f"{directory} was exported from another state of the Lucene index at {lucene_path} "
                             f"({meta['lucene_commit']['file']}, now {name}); rebuild the index")
        terms = StringTable.read(directory / "terms.txt", sorted=True)
        norms = _mapped(directory / "norms.npy") if meta["norms"] else None
        doc_freqs = _mapped(directory / "lucene_doc_freqs.npy") if meta.get("deleted_documents") else None
        return cls(meta["field"], terms, _mapped(directory / "offsets.npy"), _mapped(directory / "docs.npy"),
                   _mapped(directory / "freqs.npy"), norms, meta["max_doc"], meta["doc_count"],
                   meta["sum_total_term_freq"], docid_table(lucene_path), meta.get("num_docs"), doc_freqs)


def docid_table(lucene_path: Path, reader=None) -> StringTable:
    """The component's collection ids: its ``docids.txt`` memory-mapped, or (an index written by another tool) the
    stored ids read from Lucene."""
    table = Path(lucene_path) / DOCIDS
    if table.is_file():
        return StringTable.read(table)
    return StringTable.of(read_docid_table(Path(lucene_path), reader))


def _mapped(path: Path) -> np.ndarray:
    """A stored array memory-mapped read-only: its pages are the page cache's, shared by every process that serves the
    index, and read from disk as queries touch them (a plain ndarray view, as the compiled kernels take)."""
    return np.asarray(np.load(path, mmap_mode="r"))


def unsigned_for(top: int) -> type:
    """The smallest unsigned integer type that holds ``top``."""
    return next((t for t in (np.uint8, np.uint16, np.uint32) if top <= np.iinfo(t).max), np.uint64)


def smallest_unsigned(values: np.ndarray) -> np.ndarray:
    return values.astype(unsigned_for(int(values.max()) if len(values) else 0))


class _Segments:
    """What :func:`export` reads of one field, segment by segment: the norms by (global) doc number; per segment its
    terms, the postings kept per term (live documents) and Lucene's document frequencies (deleted documents
    included); each segment's postings written to ``spill`` once read (:meth:`end_segment`), so that memory holds one
    segment's postings at a time."""

    def __init__(self, field: str, max_doc: int, spill: Path):
        self.field = field
        self.norms = np.zeros(max_doc, dtype=np.uint8)
        self.has_norms = False
        self.terms: list[list[str]] = []
        self.dfs: list[array] = []
        self.lucene_dfs: list[array] = []
        self.docs, self.freqs = array("i"), array("i")  # Lucene's doc numbers and frequencies are Java ints
        self.spill, self.counts, self.max_freq = spill, [], 0
        self.no_more = jvm.autoclass("org.apache.lucene.search.DocIdSetIterator").NO_MORE_DOCS
        self.with_freqs = jvm.autoclass("org.apache.lucene.index.PostingsEnum").FREQS

    def read_norms(self, leaf, base: int) -> None:
        leaf_norms = leaf.getNormValues(self.field)
        if leaf_norms is None:
            return
        self.has_norms = True
        next_doc, value, no_more, norms = leaf_norms.nextDoc, leaf_norms.longValue, self.no_more, self.norms
        while (d := next_doc()) != no_more:
            norms[base + d] = value() & 0xFF

    def read_postings(self, leaf, base: int, bar) -> None:
        terms, dfs, lucene_df = [], array("q"), array("q")
        self.terms.append(terms)
        self.dfs.append(dfs)
        self.lucene_dfs.append(lucene_df)
        field_terms = leaf.terms(self.field)
        if field_terms is None:
            return
        live = leaf.getLiveDocs()  # None: no deleted document in this segment
        it = field_terms.iterator()
        next_term, doc_freq, total_freq, postings = it.next, it.docFreq, it.totalTermFreq, it.postings
        docs, freqs, no_more, with_freqs = self.docs, self.freqs, self.no_more, self.with_freqs
        pe = None
        while (term := next_term()) is not None:
            terms.append(term.utf8ToString())
            df = int(doc_freq())
            lucene_df.append(df)
            pe = postings(pe, with_freqs)
            next_posting = pe.nextDoc
            if live is not None:  # Lucene's postings still hold deleted documents; its searches skip them
                kept, is_live, freq = 0, live.get, pe.freq
                while (d := next_posting()) != no_more:
                    if is_live(d):
                        docs.append(base + d)
                        freqs.append(freq())
                        kept += 1
                dfs.append(kept)
            elif total_freq() == df:  # every frequency is 1: one call a posting
                docs.extend(base + next_posting() for _ in range(df))
                freqs.extend([1] * df)
                dfs.append(df)
            else:
                freq = pe.freq
                for _ in range(df):
                    docs.append(base + next_posting())
                    freqs.append(freq())
                dfs.append(df)
            bar.update()

    def end_segment(self) -> None:
        """Write the postings read of the segment to ``spill`` and start the next segment's."""
        segment = len(self.counts)
        freqs = np.frombuffer(self.freqs, dtype=np.int32)
        np.frombuffer(self.docs, dtype=np.int32).tofile(self.spill / f"{segment}.docs")
        freqs.tofile(self.spill / f"{segment}.freqs")
        self.counts.append(len(freqs))
        self.max_freq = max(self.max_freq, int(freqs.max()) if len(freqs) else 0)
        self.docs, self.freqs = array("i"), array("i")

    def merged(self, out: Path | None = None) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The field's terms (Lucene's order), each term's postings kept and Lucene's document frequency, and the
        postings' doc numbers and frequencies (the smallest unsigned type), ordered by term: a term's postings are
        its postings in each segment, in segment (= doc number) order. Each segment's postings are copied from its
        spill file straight to their places (a term's place is known from the document frequencies), a run at a
        time: no sort, and with ``out`` the two arrays are ``docs.npy`` and ``freqs.npy`` there, written in place
        through the page cache (memory-mapped), never whole in memory."""
        if len(self.terms) == 1:
            all_terms, segment_ids = self.terms[0], [np.arange(len(self.terms[0]), dtype=np.int64)]
        else:
            all_terms = sorted(set().union(*self.terms), key=lambda t: t.encode("utf-8"))
            ids = {t: i for i, t in enumerate(all_terms)}
            segment_ids = [np.array([ids[t] for t in terms], dtype=np.int64) for terms in self.terms]
        dfs = np.zeros(len(all_terms), dtype=np.int64)
        lucene_df = np.zeros(len(all_terms), dtype=np.int64)
        for at, kept, counts in zip(segment_ids, self.dfs, self.lucene_dfs):
            dfs[at] += np.frombuffer(kept, dtype=np.int64)
            lucene_df[at] += np.frombuffer(counts, dtype=np.int64)
        total, freq_type = int(dfs.sum()), unsigned_for(self.max_freq)
        if out is None:
            out_docs, out_freqs = np.empty(total, dtype=np.int32), np.empty(total, dtype=freq_type)
        else:
            out_docs = np.lib.format.open_memmap(out / "docs.npy", "w+", np.int32, (total,))
            out_freqs = np.lib.format.open_memmap(out / "freqs.npy", "w+", freq_type, (total,))
        cursor = np.zeros(len(all_terms), dtype=np.int64)  # where each term's next postings go
        np.cumsum(dfs[:-1], out=cursor[1:])
        for segment, (at, kept) in enumerate(zip(segment_ids, self.dfs)):
            if self.counts[segment]:
                docs = np.memmap(self.spill / f"{segment}.docs", dtype=np.int32, mode="r")
                freqs = np.memmap(self.spill / f"{segment}.freqs", dtype=np.int32, mode="r")
                _place(np.frombuffer(kept, dtype=np.int64), at, cursor, (docs, freqs), (out_docs, out_freqs))
        return all_terms, dfs, lucene_df, out_docs, out_freqs


def _place(counts: np.ndarray, terms: np.ndarray, cursor: np.ndarray, source: tuple, out: tuple) -> None:
    """Copy one segment's postings (``counts[i]`` for its term ``terms[i]``, in term order) to each term's next
    places (``cursor``, advanced), the segment's terms a run of about :data:`MERGE_RUN` postings at a time (their
    places, int64, stay small)."""
    ends = np.cumsum(counts)
    first, at = 0, 0
    while first < len(counts):
        stop = max(first + 1, int(np.searchsorted(ends, ends[first] - counts[first] + MERGE_RUN, "right")))
        run, run_terms = counts[first:stop], terms[first:stop]
        n = int(run.sum())
        target = np.repeat(cursor[run_terms] - (np.cumsum(run) - run), run)
        target += np.arange(n, dtype=np.int64)
        for values, placed in zip(source, out):
            placed[target] = values[at:at + n]
        cursor[run_terms] += run  # a segment's terms are distinct
        at += n
        first = stop


@jvm.serialized
def export(lucene_path: Path, field: str = FIELD, *, progress: bool = True, out: Path | None = None) -> Postings:
    """Read every posting and norm of ``field`` from the Lucene index at ``lucene_path`` (one pass, through
    pyjnius: about 6 us a posting here). With ``out`` (a directory), the postings arrays are written there as they
    are merged (:meth:`Postings.write` then adds the rest), else they are made in memory."""
    with tempfile.TemporaryDirectory(prefix=".segments-", dir=out) as spill:
        reader = open_reader(Path(lucene_path))
        try:
            multi = jvm.autoclass("org.apache.lucene.index.MultiTerms").getTerms(reader, field)
            if multi is None:
                raise ValueError(f"the Lucene index at {lucene_path} has no field {field!r}")
            max_doc = int(reader.maxDoc())
            leaves = reader.leaves()
            leaves = [leaves.get(i) for i in range(leaves.size())]
            segments = _Segments(field, max_doc, Path(spill))
            total_terms = sum(max(int(ctx.reader().terms(field).size()), 0) for ctx in leaves
                              if ctx.reader().terms(field) is not None)
            with tqdm(total=total_terms, desc=f"postings {Path(lucene_path).name}", unit="term",
                      disable=not progress) as bar:
                for ctx in leaves:
                    leaf, base = ctx.reader(), int(ctx.docBase)
                    segments.read_norms(leaf, base)
                    segments.read_postings(leaf, base, bar)
                    segments.end_segment()
            doc_count, sum_ttf = int(multi.getDocCount()), int(multi.getSumTotalTermFreq())
            num_docs = int(reader.numDocs())
            docids = docid_table(Path(lucene_path), reader)
        finally:
            reader.close()
        all_terms, dfs, lucene_df, docs, freqs = segments.merged(out)
    norms = segments.norms if segments.has_norms else None
    offsets = np.zeros(len(all_terms) + 1, dtype=np.int64)
    np.cumsum(dfs, out=offsets[1:])
    deleted = num_docs < max_doc
    return Postings(field, StringTable.of(all_terms, sorted=True), offsets, docs, freqs, norms, max_doc, doc_count,
                    sum_ttf, docids, num_docs, lucene_df.astype(np.int32) if deleted else None)


def write_postings(lucene_path: Path, field: str = FIELD) -> dict:
    """Export the postings of a finished Lucene component and store them in ``<lucene_path>/postings``; returns
    what the manifest records."""
    start, directory = time.perf_counter(), Path(lucene_path) / DIRECTORY
    directory.mkdir(parents=True, exist_ok=True)
    postings = export(lucene_path, field, out=directory)
    seconds = time.perf_counter() - start
    postings.write(directory, Path(lucene_path), seconds)
    return {"directory": DIRECTORY, "terms": len(postings.terms), "postings": len(postings.docs),
            "seconds": round(seconds, 2)}


def open_postings(lucene_path: Path, field: str = FIELD) -> Postings:
    """The postings of ``field``: read from ``<lucene_path>/postings``, or exported now from an index built without
    them (with a warning: rebuilding the index stores them)."""
    lucene_path = Path(lucene_path)
    directory = lucene_path / DIRECTORY
    if (directory / "meta.json").is_file():
        postings = Postings.read(directory, lucene_path)
        if postings.field != field:
            raise ValueError(f"{directory} holds field {postings.field!r}, not {field!r}")
        return postings
    log.warning("%s has no stored postings (built before weir stored them): reading them from Lucene now; "
                "`weir index upgrade INDEX` stores them, and the index then opens at once", lucene_path)
    return export(lucene_path, field)
