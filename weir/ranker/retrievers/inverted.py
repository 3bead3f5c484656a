"""Top-k over a Lucene field's postings in this process: Lucene's BM25 and impact scores and rankings, bit for bit.

Why by hand: searching through Lucene costs the Java bridge per hit and holds the one Java lock per query
(:mod:`weir.core.jvm`); bm25s and friends are fast but score their own index, not Lucene's (their rankings differ from
pyserini's). Here the postings are read once from the Lucene index (:mod:`weir.indexer.postings`) and a query is scored
term at a time into a dense accumulator, the way bm25s does, with Lucene's arithmetic reproduced operation for
operation (Lucene 9.9, read from its bytecode):

- BM25 (``BM25Similarity``): ``idf = (float) log(1 + (docCount - df + 0.5) / (df + 0.5))`` in double;
  ``avgdl = (float) (sumTotalTermFreq / (double) docCount)``; per norm byte
  ``cache[n] = 1f / (k1 * ((1 - b) + b * LENGTH_TABLE[n] / avgdl))`` in float; a term's weight is
  ``boost * idf`` and its score ``weight - weight / (1f + freq * cache[norm])``, all in float (IEEE single
  precision in Java and in numpy alike);
- impacts (Anserini's ``ImpactSimilarity``): ``freq * boost`` in float;
- a document's score is the double sum of its terms' float scores, cast to float (Lucene's disjunction scorers
  sum in double). Those sums are exact here (a few float terms of similar magnitude fit a double's mantissa), so
  the order of the terms does not matter;
- ties are broken as weir's Lucene search broke them (``Sort(SCORE, id STRING_VAL)``): by collection id in UTF-8
  byte order (Python's string order), then by Lucene doc number.

``tests/collections/test_inverted.py`` checks every rank and score of every SciFact query against Lucene, for the
BM25 index and both learned index formats; ``scripts/sparse_exactness.py`` does the same for any index and topics.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from functools import cached_property

import numpy as np

from weir.core import bm25

from weir.indexer.postings import LENGTH_TABLE, Postings
from weir.indexer.shards import CollectionStatistics
from weir.ranker.retrievers import maxscore
from weir.ranker.stage import Retriever
from weir.core.hits import DocIds, Ranked
from weir.core.types import Query, Run

ONE = np.float32(1)
BLOCK = 1 << 20  # postings per block when scores are precomputed (bounds the temporaries to ~30 MiB)


class TermScores:
    """The float score of each posting of a term for a query weight (boost), in one similarity: what the pruned
    kernel computes per posting (:mod:`weir.ranker.retrievers.maxscore`, ``kind`` and ``cache``), and, for the
    exhaustive scorer, ``unit``, the score of every posting at weight 1 (made only when that scorer is used)."""

    name = ""
    kind = -1
    cache = np.zeros(256, dtype=np.float32)  # BM25's length factor per norm byte (unused by impacts)

    def __init__(self, postings: Postings):
        self.postings = postings

    @cached_property
    def blocks(self) -> maxscore.BlockMaxima:
        """The block maxima the pruned search skips by (one pass over the postings, when first asked)."""
        p = self.postings
        norms = p.norms if p.norms is not None else np.zeros(1, dtype=np.uint8)
        return maxscore.BlockMaxima(p.offsets, p.docs, p.freqs, norms, self.cache, self.kind)

    @cached_property
    def unit(self) -> np.ndarray:
        raise NotImplementedError

    @cached_property
    def can_be_zero(self) -> bool:
        """Whether a matched posting can score 0 (then a matched document can sum to 0)."""
        return not bool((self.unit > 0).all())

    def weight(self, term: int, boost: float) -> np.float32:
        """The kernel's weight of a query term: BM25's ``boost * idf``, an impact's boost."""
        raise NotImplementedError

    def contributions(self, term: int, boost: float) -> np.ndarray:
        """The score of each posting of ``term`` at ``boost``."""
        start, end = self.postings.offsets[term], self.postings.offsets[term + 1]
        if boost == 1:
            return self.unit[start:end]
        return self.scores_at(term, np.arange(start, end), boost)

    def scores_at(self, term: int, positions: np.ndarray, boost: float) -> np.ndarray:
        """The scores of the postings at ``positions`` (of ``term``) at ``boost``."""
        raise NotImplementedError


class BM25Scores(TermScores):
    """Lucene's ``BM25Similarity(k1, b)``."""

    name = "bm25"
    kind = maxscore.BM25

    def __init__(self, postings: Postings, k1: float, b: float, statistics: CollectionStatistics | None = None):
        super().__init__(postings)
        if postings.norms is None:
            raise ValueError(f"field {postings.field!r} has no length norms: BM25 needs them")
        self.k1, self.b = np.float32(k1), np.float32(b)
        # the collection statistics: this index's own, or a whole shard set's (weir.indexer.shards), which make a
        # shard's scores those of one index over every shard's documents
        doc_count, sum_ttf, doc_freqs = postings.doc_count, postings.sum_total_term_freq, postings.doc_freqs
        if statistics is not None:
            if len(statistics.doc_freqs) != len(postings.terms):
                raise ValueError(f"collection statistics for {len(statistics.doc_freqs)} terms, the postings hold "
                                 f"{len(postings.terms)}")
            doc_count, sum_ttf, doc_freqs = (statistics.doc_count, statistics.sum_total_term_freq,
                                             statistics.doc_freqs)
        avgdl = np.float32(sum_ttf / float(doc_count))
        lengths = LENGTH_TABLE.astype(np.float32)
        with np.errstate(divide="ignore"):  # k1 = 0: an infinite cache, a posting scores its idf (as in Lucene)
            self.cache = (ONE / (self.k1 * ((ONE - self.b) + self.b * lengths / avgdl))).astype(np.float32)
        self.idf = bm25.idf(float(doc_count), doc_freqs.astype(np.float64)).astype(np.float32)

    @cached_property
    def unit(self) -> np.ndarray:
        """The score of every posting at boost 1, computed a block at a time (the temporaries stay small) and in place:
        x = 1 + freq * cache[norm], then idf - idf / x, the same float operations as Lucene's."""
        postings = self.postings
        unit = np.empty(len(postings.docs), dtype=np.float32)
        for start in range(0, len(unit), BLOCK):
            end = min(start + BLOCK, len(unit))
            term_of_posting = np.searchsorted(postings.offsets, np.arange(start, end), side="right") - 1
            x = postings.freqs[start:end].astype(np.float32)
            x *= self.cache[postings.norms[postings.docs[start:end]]]
            x += ONE
            w = self.idf[term_of_posting]
            np.divide(w, x, out=x)
            np.subtract(w, x, out=unit[start:end])
        return unit

    def weight(self, term: int, boost: float) -> np.float32:
        return np.float32(boost) * self.idf[term]

    def scores_at(self, term: int, positions: np.ndarray, boost: float) -> np.ndarray:
        weight, p = self.weight(term, boost), self.postings
        denominator = ONE + p.freqs[positions].astype(np.float32) * self.cache[p.norms[p.docs[positions]]]
        return weight - weight / denominator


class ImpactScores(TermScores):
    """Anserini's ``ImpactSimilarity``: a posting's score is its stored frequency (the quantized impact) times the
    query term's weight."""

    name = "impact"
    kind = maxscore.IMPACT

    @cached_property
    def unit(self) -> np.ndarray:
        return self.postings.freqs.astype(np.float32)

    def weight(self, term: int, boost: float) -> np.float32:
        return np.float32(boost)

    def scores_at(self, term: int, positions: np.ndarray, boost: float) -> np.ndarray:
        return self.postings.freqs[positions].astype(np.float32) * np.float32(boost)


PRUNED_FROM_DOCS = 3_000_000  # deep top k (above DEEP_K) over fewer documents: the exhaustive scorer is faster
DEEP_K = 100


def prunes(documents: int, k: int) -> bool:
    """Whether the pruned search answers a top ``k`` over ``documents`` by default. Measured by bench/scale.py (one
    thread, medians of 1,000 queries): at k=10 pruning wins from 1M documents (0.64 ms against 2.00) and ties at 100k;
    at k=1000 the exhaustive scorer wins at 100k (0.27 ms against 0.56) and 1M (2.16 against 2.27), pruning at 8.8M
    (8.4 against 31.9): with a low k-th score nearly every posting is scored either way, and the exhaustive scorer's
    numpy passes cost less per posting while the collection is small."""
    return k <= DEEP_K or documents >= PRUNED_FROM_DOCS


class InvertedIndex:
    """Top-k search and candidate scoring over one field's postings with one similarity. Thread-safe: a search
    reads shared arrays only and accumulates into arrays of its own. :meth:`shared` gives the stages that search the
    same postings with the same similarity (``bm25`` and the LTR features) one engine, computed once."""

    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls, postings: Postings, scores: type[TermScores], **parameters) -> InvertedIndex:
        """The engine of ``postings`` with this similarity, made once and kept with the postings (it lives as long
        as they do)."""
        key = (cls, scores, tuple(sorted(parameters.items())))
        with cls._shared_lock:
            if key not in postings.derived:
                postings.derived[key] = cls(scores(postings, **parameters))
            return postings.derived[key]

    def __init__(self, scores: TermScores):
        postings = scores.postings
        docids = postings.docids
        if len(docids) != postings.max_doc:
            raise ValueError(f"{len(docids)} collection ids for {postings.max_doc} Lucene documents")
        self.scores = scores
        self.postings = postings
        self.docids = docids
        self.ids = DocIds(docids)  # doc number -> collection id, for the hits this engine ranks
        # rank of each document's id in string order: the tie-break after the score
        self.id_rank = self.ids.rank

    def _accumulate(self, weights: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
        """Every document's score (the double sum of its float term scores; one ``bincount`` over the postings of
        the query's terms), and the doc numbers of those postings (empty when no query term is in the index)."""
        offsets, docs = self.postings.offsets, self.postings.docs
        unit = self.scores.unit
        found, contributions = [], []
        for weight, t in zip(weights.values(), self._term_numbers(weights)):
            if t >= 0:
                start, end = offsets[t], offsets[t + 1]
                found.append(docs[start:end])
                contributions.append(unit[start:end] if weight == 1 else self.scores.contributions(t, weight))
        if not found:
            return np.zeros(0), np.zeros(0, dtype=np.int32)
        matched = np.concatenate(found) if len(found) > 1 else found[0]
        scores = np.concatenate(contributions) if len(found) > 1 else contributions[0]
        return np.bincount(matched, weights=scores, minlength=self.postings.max_doc), matched

    def search(self, weights: Mapping[str, float], k: int) -> list[tuple[str, float]]:
        """The top ``k`` (collection id, score) for a query given as {term: weight}, in Lucene's order."""
        docs, scores = self.top(weights, k)
        return list(zip(self.docids_of(docs), scores.tolist()))

    def docids_of(self, docs: np.ndarray) -> list[str]:
        """The collection ids of Lucene doc numbers."""
        return self.ids.of(docs)

    def top(self, weights: Mapping[str, float], k: int, *,
            exhaustive: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The top ``k`` as arrays: Lucene doc numbers and float32 scores, best first, by either scorer (the same
        answer): block-max MaxScore (:mod:`weir.ranker.retrievers.maxscore`, the GIL released) or, with
        ``exhaustive=True``, every posting of the query's terms scored (the oracle the tests compare the pruned search
        with). By default (None) the one :func:`prunes` picks for this collection and k."""
        if exhaustive is None:
            exhaustive = not prunes(self.postings.max_doc, k)
        if exhaustive:
            return self._top_exhaustive(weights, k)
        query = self._query(weights, k)
        if k <= 0 or query is None:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        p, similarity = self.postings, self.scores
        blocks = similarity.blocks
        norms = p.norms if p.norms is not None else np.zeros(1, dtype=np.uint8)
        index = (p.docs, p.freqs, norms, similarity.cache, blocks.last_doc, blocks.max_key)
        docs, scores = maxscore.top_k(index, query, similarity.kind, self.id_rank, k, p.max_doc)
        return self._ordered(docs, scores, k)

    def _query(self, weights: Mapping[str, float], k: int) -> tuple | None:
        """The kernel's view of a query for a top ``k``: per known term its postings, its blocks, its weight and
        its keys; None when no query term is in the index."""
        offsets = self.postings.offsets
        blocks = self.scores.blocks
        first_block = blocks.first_block
        terms, kernel_weights = [], []
        for weight, t in zip(weights.values(), self._term_numbers(weights)):
            if t >= 0 and offsets[t] < offsets[t + 1]:
                terms.append(t)
                kernel_weights.append(self.scores.weight(t, weight))
        if not terms:
            return None
        ts = np.array(terms, dtype=np.int64)
        return (offsets[ts], offsets[ts + 1], first_block[ts], first_block[ts + 1],
                np.array(kernel_weights, dtype=np.float32), blocks.term_key[ts], blocks.floor_keys(ts, k))

    def _term_numbers(self, weights: Mapping[str, float]) -> np.ndarray:
        """Each query term's number in the postings (-1: not in the index), its weight checked."""
        for term, weight in weights.items():
            if not weight > 0:
                raise ValueError(f"query term weights must be positive (got {weight!r} for {term!r})")
        return self.postings.terms.find(list(weights))

    def _ordered(self, candidates: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` of ``candidates`` in Lucene's order: higher scores first, then the id's rank."""
        # one sort key: a positive float32's bits order like its value
        key = (np.int64(0x7FFFFFFF) - scores.view(np.int32).astype(np.int64)) << 32 | self.id_rank[candidates]
        order = np.argsort(key)[:k]
        return candidates[order].astype(np.int64, copy=False), scores[order]

    def _top_exhaustive(self, weights: Mapping[str, float], k: int) -> tuple[np.ndarray, np.ndarray]:
        acc, matched = self._accumulate(weights) if k > 0 else (None, ())
        if not len(matched):
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        if len(matched) * 8 < len(acc):  # few postings: the matched documents, sorted and deduplicated
            ordered = np.sort(matched)  # (np.unique is ten times slower here: numpy 2.4)
            candidates = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
        elif self.scores.can_be_zero:
            hit = np.zeros(len(acc), dtype=bool)
            hit[matched] = True
            candidates = np.flatnonzero(hit)
        else:  # many: one pass over the collection (a matched document's sum is positive)
            candidates = np.flatnonzero(acc != 0)
        scores = acc[candidates].astype(np.float32)
        if len(candidates) > k:  # the k-th best score; every document scoring it stays, for the tie-break to choose
            keep = scores >= np.partition(scores, len(scores) - k)[len(scores) - k]
            candidates, scores = candidates[keep], scores[keep]
        return self._ordered(candidates, scores, k)

    def score(self, weights: Mapping[str, float], docids: Sequence[str]) -> list[float]:
        """The score of each of ``docids`` for the query (0 for a document without a query term, or unknown): each
        query term's postings searched for the candidates (a binary search a candidate and term), never an
        accumulator over the collection."""
        numbers = self.ids.find(list(docids)) if len(docids) else np.zeros(0, dtype=np.int64)
        known = numbers >= 0
        total = np.zeros(len(numbers), dtype=np.float64)
        offsets, docs = self.postings.offsets, self.postings.docs
        for weight, t in zip(weights.values(), self._term_numbers(weights)):
            if t < 0 or not known.any():
                continue
            start, end = int(offsets[t]), int(offsets[t + 1])
            at = np.searchsorted(docs[start:end], numbers).clip(0, max(end - start - 1, 0))
            hit = known & (docs[start + at] == numbers) if end > start else np.zeros(len(numbers), dtype=bool)
            if hit.any():
                total[hit] += self.scores.scores_at(t, start + at[hit], weight)
        return total.astype(np.float32).tolist()

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays searched (postings, norms, block maxima, tie-break ranks)."""
        extra = self.scores.blocks.nbytes + self.id_rank.nbytes
        return self.postings.nbytes + extra


class SparseRetriever(Retriever):
    """A first stage over an :class:`InvertedIndex` (``self.engine``): :meth:`weights` turns query texts into
    {term: weight} (analyzed terms for BM25, the learned models' terms for the learned indexes)."""

    engine: InvertedIndex

    def weights(self, texts: Sequence[str]) -> list[dict[str, float]]:
        raise NotImplementedError

    def search(self, texts: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
        """The top ``k`` (collection id, score) of each query text, best first: this stage without a :class:`Run`."""
        return [self.engine.search(w, k) for w in self.weights(texts)]

    def retrieve(self, queries: Sequence[Query], k: int) -> Run:
        """The top ``k`` of each query, held as arrays (no ``Hit`` is made unless a caller asks for one)."""
        name, engine, run = self.name, self.engine, Run()
        for q, weights in zip(queries, self.weights([q.text for q in queries])):
            docs, scores = engine.top(weights, k)
            run[q.id] = Ranked.of_stage(engine.ids, docs, scores, name)
        return run
