"""Rank-safe dynamic pruning for the in-process sparse engine: block-max MaxScore over document-id windows.

The exhaustive engine (:class:`weir.ranker.retrievers.inverted.InvertedIndex` with ``exhaustive=True``) adds every
posting of every query term into an accumulator over the whole collection, so its cost grows with the collection even
at k=10. This kernel skips what cannot reach the top k, as Lucene (block-max MaxScore since 9.x) and PISA do, and
gives the same hits and the same float scores:

- each term's postings are cut into blocks of :data:`BLOCK_SIZE` postings; per block the last doc number and the
  largest score are kept (:class:`BlockMaxima`, derived once from a similarity's precomputed scores);
- documents are taken in windows of :data:`WINDOW` doc numbers; in each window every term's bound is the largest
  block maximum of the blocks overlapping the window. The terms whose bounds sum (in double, cast to float as a
  score is) below the current k-th score are *non-essential*: a document they alone match cannot enter the top k.
  If every term is non-essential, the window is skipped;
- the essential terms' postings in the window are added term at a time into a window accumulator (float64, as
  Lucene's disjunction sums in double), then each touched document, in doc order, looks up the non-essential terms
  (best bound first, skipping whole blocks by their last doc) only while its score plus the bounds left could still
  reach the k-th score;
- the top k is a heap ordered as the exhaustive engine orders hits: score, then the rank of the collection id.

Exactness: a bound is a sum of block maxima in double, so it is at least the double sum of the document's term scores,
and rounding to float is monotone: a document is dropped only when ``float32(bound) < kth_score``, which it can then
neither beat nor tie. Equal scores are therefore always compared by id, as the oracle does.

Why by hand: no library runs MaxScore over Lucene's postings with Lucene's arithmetic; PISA and Lucene each score their
own index through their own process or bridge. The kernel is compiled by numba (a wheel from PyPI, no toolchain on
the user's machine), ``nogil=True``, so queries answered on several threads use several cores.
"""

from __future__ import annotations

import numba
import numpy as np

BLOCK_SIZE = 128  # postings per block (Lucene's and PISA's block size)
WINDOW = 1 << 13  # doc numbers per window


class BlockMaxima:
    """Per term its blocks (``first_block[t]:first_block[t + 1]``), per block its last doc number and largest score."""

    def __init__(self, offsets: np.ndarray, docs: np.ndarray, scores: np.ndarray):
        lengths = np.diff(offsets)
        blocks = (lengths + BLOCK_SIZE - 1) // BLOCK_SIZE
        self.first_block = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(blocks, out=self.first_block[1:])
        total = int(self.first_block[-1])
        # the first posting of every block: its term's start plus a multiple of the block size
        within = np.arange(total, dtype=np.int64) - np.repeat(self.first_block[:-1], blocks)
        starts = np.repeat(offsets[:-1], blocks) + within * BLOCK_SIZE
        ends = np.minimum(starts + BLOCK_SIZE, np.repeat(offsets[1:], blocks))
        self.last_doc = docs[ends - 1].astype(np.int32) if total else np.zeros(0, dtype=np.int32)
        self.max_score = (np.maximum.reduceat(scores, starts).astype(np.float32) if total
                          else np.zeros(0, dtype=np.float32))

    @staticmethod
    def of_term(scores: np.ndarray) -> np.ndarray:
        """The block maxima of one term's scores (for a query weight whose scores are computed when asked)."""
        if not len(scores):
            return np.zeros(0, dtype=np.float32)
        return np.maximum.reduceat(scores, np.arange(0, len(scores), BLOCK_SIZE)).astype(np.float32)

    @property
    def nbytes(self) -> int:
        return self.first_block.nbytes + self.last_doc.nbytes + self.max_score.nbytes


@numba.njit(nogil=True, cache=True, inline="always")
def _better(score_a, rank_a, score_b, rank_b) -> bool:
    return score_a > score_b or (score_a == score_b and rank_a < rank_b)


@numba.njit(nogil=True, cache=True)
def _sift_down(h_score, h_rank, h_doc, size, at):
    """Restore the min-heap (worst hit at the root) below ``at``."""
    while True:
        left = 2 * at + 1
        if left >= size:
            return
        child = left
        right = left + 1
        if right < size and _better(h_score[left], h_rank[left], h_score[right], h_rank[right]):
            child = right
        if _better(h_score[at], h_rank[at], h_score[child], h_rank[child]):
            h_score[at], h_score[child] = h_score[child], h_score[at]
            h_rank[at], h_rank[child] = h_rank[child], h_rank[at]
            h_doc[at], h_doc[child] = h_doc[child], h_doc[at]
            at = child
        else:
            return


@numba.njit(nogil=True, cache=True)
def _offer(h_score, h_rank, h_doc, size, k, score, rank, doc):
    """Offer a hit to the heap of at most ``k``; returns the heap's new size."""
    if size < k:
        at = size
        h_score[at], h_rank[at], h_doc[at] = score, rank, doc
        size += 1
        while at > 0:  # sift up
            parent = (at - 1) // 2
            if _better(h_score[parent], h_rank[parent], h_score[at], h_rank[at]):
                h_score[at], h_score[parent] = h_score[parent], h_score[at]
                h_rank[at], h_rank[parent] = h_rank[parent], h_rank[at]
                h_doc[at], h_doc[parent] = h_doc[parent], h_doc[at]
                at = parent
            else:
                break
        return size
    if _better(score, rank, h_score[0], h_rank[0]):
        h_score[0], h_rank[0], h_doc[0] = score, rank, doc
        _sift_down(h_score, h_rank, h_doc, size, 0)
    return size


@numba.njit(nogil=True, cache=True)
def top_k(docs, unit, block_last, block_max, starts, ends, first_blocks, block_ends, own, own_max, own_at,
          id_rank, k, max_doc):
    """The top ``k`` documents of one query: (doc numbers, float32 scores), in no particular order.

    Term ``i`` of the query owns postings ``starts[i]:ends[i]`` of ``docs`` and blocks ``first_blocks[i]:
    block_ends[i]``; its scores are ``unit`` and its block maxima ``block_max`` when ``own_at[i] < 0``, otherwise
    ``own[own_at[i] + p - starts[i]]`` and ``own_max[block_own + b - first_blocks[i]]`` (a query weight other than 1:
    ``own_at`` is then ``(posting offset, block offset)`` packed as two int64 columns)."""
    n = len(starts)
    h_score = np.empty(k, dtype=np.float32)
    h_rank = np.empty(k, dtype=np.int64)
    h_doc = np.empty(k, dtype=np.int64)
    size = 0
    threshold = np.float32(-np.inf)
    pos = starts.copy()
    block = first_blocks.copy()
    bound = np.zeros(n, dtype=np.float64)
    prefix = np.zeros(n + 1, dtype=np.float64)
    acc = np.zeros(WINDOW, dtype=np.float64)
    seen = np.zeros(WINDOW, dtype=np.bool_)
    touched = np.empty(WINDOW, dtype=np.int64)

    low = max_doc
    for i in range(n):
        if pos[i] < ends[i] and docs[pos[i]] < low:
            low = docs[pos[i]]
    while low < max_doc:
        high = min(low + WINDOW, max_doc)
        # each term's bound in [low, high): the largest maximum of the blocks that overlap the window
        for i in range(n):
            bound[i] = 0.0
            b = block[i]
            while b < block_ends[i] and block_last[b] < low:
                b += 1
            block[i] = b
            if b >= block_ends[i]:
                pos[i] = ends[i]
                continue
            first = starts[i] + (b - first_blocks[i]) * BLOCK_SIZE
            if pos[i] < first:
                pos[i] = first
            while b < block_ends[i] and docs[starts[i] + (b - first_blocks[i]) * BLOCK_SIZE] < high:
                if own_at[i, 0] < 0:
                    m = block_max[b]
                else:
                    m = own_max[own_at[i, 1] + b - first_blocks[i]]
                if m > bound[i]:
                    bound[i] = m
                b += 1
        order = np.argsort(bound)
        for j in range(n):
            prefix[j + 1] = prefix[j] + bound[order[j]]
        essential = 0  # terms order[:essential] are non-essential
        while essential < n and np.float32(prefix[essential + 1]) < threshold:
            essential += 1
        if essential < n:
            # the essential terms' postings in the window, term at a time
            count = 0
            for j in range(essential, n):
                i = order[j]
                p = pos[i]
                end = ends[i]
                while p < end and docs[p] < low:
                    p += 1
                own_p = own_at[i, 0] - starts[i]
                while p < end and docs[p] < high:
                    d = docs[p] - low
                    if not seen[d]:
                        seen[d] = True
                        acc[d] = 0.0
                        touched[count] = d
                        count += 1
                    acc[d] += unit[p] if own_at[i, 0] < 0 else own[own_p + p]
                    p += 1
                pos[i] = p
            if essential > 0 and count > 1:
                touched[:count].sort()
            for c in range(count):
                d = touched[c]
                seen[d] = False
                s = acc[d]
                doc = low + d
                if essential > 0:
                    if np.float32(s + prefix[essential]) < threshold:
                        continue
                    dropped = False
                    for j in range(essential - 1, -1, -1):
                        i = order[j]
                        b = block[i]
                        while b < block_ends[i] and block_last[b] < doc:
                            b += 1
                        block[i] = b
                        if b < block_ends[i]:
                            p = max(pos[i], starts[i] + (b - first_blocks[i]) * BLOCK_SIZE)
                            while docs[p] < doc:
                                p += 1
                            pos[i] = p
                            if docs[p] == doc:
                                s += unit[p] if own_at[i, 0] < 0 else own[own_at[i, 0] - starts[i] + p]
                        else:
                            pos[i] = ends[i]
                        if np.float32(s + prefix[j]) < threshold:
                            dropped = True
                            break
                    if dropped:
                        continue
                score = np.float32(s)
                size = _offer(h_score, h_rank, h_doc, size, k, score, id_rank[doc], doc)
                if size == k:
                    threshold = h_score[0]
        # the next window starts at the next posting any term has left
        low = max_doc
        for i in range(n):
            if pos[i] < ends[i] and docs[pos[i]] < low:
                low = docs[pos[i]]
        if low < high:
            low = high
    return h_doc[:size], h_score[:size]
