"""PISA (Mallia et al., "PISA: Performant Indexes and Search for Academia", OSIRRC 2019) over the postings weir
exported, for ``bench/scale.py query --pisa``: an engine built for speed, answering the same queries over the same
postings. A bench-only extra, never a dependency of weir:

    pip install --no-deps pyterrier-pisa==0.4.9 tbb==2020.3.254

Only the wheel's compiled module is used (``_pisathon``: PISA's index building and query processing); the package
around it, which needs PyTerrier and a JVM of its own, is not imported.

The collection is handed over in PISA's own binary format (what ``pyciff`` writes from a CIFF file, the common
interchange format of Lin et al. 2020), written straight from weir's arrays: a sequence is a little-endian uint32
length and that many uint32 values; ``inv.docs`` holds the document count and then each term's doc numbers,
``inv.freqs`` each term's frequencies, ``inv.sizes`` each document's length; ``fwd.terms`` and ``fwd.documents`` the
terms (weir's, already analyzed: sorted as PISA's lexicon needs) and the collection ids, one a line. Going through a
CIFF file instead would encode every posting as a protobuf message in Python (minutes per 100M postings) to read it
back into the same files. Document lengths are the ones Lucene's norms stand for (``LENGTH_TABLE``), so PISA's BM25
ranks as Lucene's does but for the mean length, which PISA takes over those lengths, and float rounding; the
queries are weir's analyzed terms, each repeated as often as it is in the query (PISA's way of weighting one).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import time
from pathlib import Path

import numpy as np

ENCODING = "block_simdbp"  # PISA's fastest codec in its own benchmarks
BLOCK = 64  # postings per block of the block-max data (PISA's default)


def _module():
    spec = importlib.util.find_spec("pyterrier_pisa")  # the package's location; its __init__ is not run
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("PISA is a bench-only extra: pip install --no-deps pyterrier-pisa==0.4.9 tbb==2020.3.254")
    folder = Path(list(spec.submodule_search_locations)[0])
    path = next(folder.glob("_pisathon*.so"))
    loader = importlib.machinery.ExtensionFileLoader("_pisathon", str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("_pisathon", loader))
    loader.exec_module(module)
    return module


def _sequences(path: Path, offsets: np.ndarray, values: np.ndarray, head: np.ndarray | None = None) -> None:
    """Each ``values[offsets[t]:offsets[t + 1]]`` as one sequence (after ``head``, a sequence of its own)."""
    with open(path, "wb") as f:
        if head is not None:
            np.array([len(head)], dtype="<u4").tofile(f)
            head.astype("<u4").tofile(f)
        lengths = np.diff(offsets)
        step = 1 << 16  # terms written at a time: one array of lengths and values each
        for first in range(0, len(lengths), step):
            last = min(first + step, len(lengths))
            start, end = int(offsets[first]), int(offsets[last])
            out = np.empty(end - start + last - first, dtype="<u4")
            at = (offsets[first:last] - start) + np.arange(last - first)  # each length's place
            out[at] = lengths[first:last]
            mask = np.ones(len(out), dtype=bool)
            mask[at] = False
            out[mask] = values[start:end]
            out.tofile(f)


def write_collection(postings, component: Path, out: Path) -> None:
    """PISA's binary collection and lexicons in ``out`` from an opened component's postings."""
    from weir.indexer.postings import LENGTH_TABLE

    out.mkdir(parents=True, exist_ok=True)
    if postings.norms is None:
        raise SystemExit("PISA's BM25 needs document lengths: the component has no norms")
    _sequences(out / "inv.docs", postings.offsets, postings.docs, head=np.array([postings.max_doc]))
    _sequences(out / "inv.freqs", postings.offsets, postings.freqs)
    sizes = LENGTH_TABLE[np.asarray(postings.norms)]
    _sequences(out / "inv.sizes", np.array([0, len(sizes)]), sizes)
    (out / "fwd.terms").write_bytes((component / "postings" / "terms.txt").read_bytes())
    (out / "fwd.documents").write_bytes((component / "docids.txt").read_bytes())


class Pisa:
    """PISA's BM25 (k1, b) over weir's postings of one component; the index is built under ``folder`` once and
    reused, opened once for every algorithm."""

    def __init__(self, postings, component: Path, folder: Path, *, k1: float = 0.9, b: float = 0.4):
        self.pisathon = _module()
        if not (folder / "fwd.doclex").exists():
            start = time.perf_counter()
            write_collection(postings, component, folder)
            self.pisathon.build_binlex(str(folder / "fwd.terms"), str(folder / "fwd.termlex"))
            self.pisathon.build_binlex(str(folder / "fwd.documents"), str(folder / "fwd.doclex"))
            print(f"PISA's collection written in {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        self.context = self.pisathon.RetrievalContext()
        self.pisathon.prepare_index(self.context, str(folder), ENCODING, "bm25", "", block_size=BLOCK, quantize=0,
                                    bm25_k1=k1, bm25_b=b, stop_fname="")
        print(f"PISA's index ({ENCODING}, block-max data of {BLOCK}) ready in {time.perf_counter() - start:.1f} s")

    def search(self, weights: dict[str, float], k: int, algorithm: str) -> list[tuple[str, float]]:
        """The top ``k`` (collection id, score) of one query given as {analyzed term: times in the query}, by
        ``algorithm`` (``maxscore``, ``block_max_maxscore``, ``block_max_wand``, ...)."""
        docnos = np.empty(k, dtype=object)
        qidxs, ranks, scores = np.empty(k, np.int32), np.empty(k, np.int32), np.empty(k, np.float32)
        size = self.pisathon.retrieve(self.context, algorithm, [(0, {t: float(w) for t, w in weights.items()})],
                                      k=k, threads=1, pretokenised=True, query_weighted=1, result_qidxs=qidxs,
                                      result_docnos=docnos, result_ranks=ranks, result_scores=scores)
        return list(zip(docnos[:size].tolist(), scores[:size].tolist()))
