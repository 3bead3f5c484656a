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


BM25, IMPACT = 0, 1  # the similarities the kernel scores with


@numba.njit(nogil=True, cache=True, inline="always")
def _key(kind, freq, doc, norms, cache):
    """What a posting's score grows with: BM25's ``1 + freq * cache[norm]`` (Lucene's float operations), an impact's
    frequency."""
    if kind == BM25:
        return np.float32(1) + np.float32(freq) * cache[norms[doc]]
    return np.float32(freq)


@numba.njit(nogil=True, cache=True, inline="always")
def _score(kind, weight, key):
    """Lucene's float score of a posting from its key and the query term's weight (BM25: ``boost * idf``; impact:
    the boost): BM25Similarity's ``weight - weight / (1 + freq * cache[norm])``, ImpactSimilarity's ``freq * boost``.
    Both grow with the key, so a block's largest key gives its largest score at any weight."""
    if kind == BM25:
        return weight - weight / key
    return key * weight


@numba.njit(nogil=True, cache=True)
def _block_maxima(offsets, docs, freqs, norms, cache, kind, first_block, last_doc, max_key):
    for t in range(len(offsets) - 1):
        b = first_block[t]
        for start in range(offsets[t], offsets[t + 1], BLOCK_SIZE):
            end = min(start + BLOCK_SIZE, offsets[t + 1])
            top = np.float32(0)
            for p in range(start, end):
                k = _key(kind, freqs[p], docs[p], norms, cache)
                if k > top:
                    top = k
            last_doc[b] = docs[end - 1]
            max_key[b] = top
            b += 1


class BlockMaxima:
    """Per term its blocks (``first_block[t]:first_block[t + 1]``), per block its last doc number and its largest
    key (:func:`_key`), from which the block's largest score at any query weight follows. One pass over the postings
    (about a second per 300M postings), made when an engine is opened: BM25's keys depend on k1, b and the collection
    statistics (a shard scores with its shard set's), so they are not stored with the index."""

    def __init__(self, offsets: np.ndarray, docs: np.ndarray, freqs: np.ndarray, norms: np.ndarray,
                 cache: np.ndarray, kind: int):
        blocks = (np.diff(offsets) + BLOCK_SIZE - 1) // BLOCK_SIZE
        self.first_block = np.zeros(len(blocks) + 1, dtype=np.int64)
        np.cumsum(blocks, out=self.first_block[1:])
        total = int(self.first_block[-1])
        self.last_doc = np.empty(total, dtype=np.int32)
        self.max_key = np.empty(total, dtype=np.float32)
        _block_maxima(offsets, docs, freqs, norms, cache.astype(np.float32), kind, self.first_block, self.last_doc,
                      self.max_key)

    @property
    def nbytes(self) -> int:
        return self.first_block.nbytes + self.last_doc.nbytes + self.max_key.nbytes


@numba.njit(nogil=True, cache=True, inline="always")
def _better(score_a, rank_a, score_b, rank_b) -> bool:
    return score_a > score_b or (score_a == score_b and rank_a < rank_b)


@numba.njit(nogil=True, cache=True, inline="always")
def _swap(h_score, h_rank, h_doc, a, b):
    h_score[a], h_score[b] = h_score[b], h_score[a]
    h_rank[a], h_rank[b] = h_rank[b], h_rank[a]
    h_doc[a], h_doc[b] = h_doc[b], h_doc[a]


@numba.njit(nogil=True, cache=True)
def _sift_down(h_score, h_rank, h_doc, size, at):
    """Restore the min-heap (worst hit at the root) below ``at``."""
    while 2 * at + 1 < size:
        child = 2 * at + 1  # the worse child
        if child + 1 < size and _better(h_score[child], h_rank[child], h_score[child + 1], h_rank[child + 1]):
            child += 1
        if not _better(h_score[at], h_rank[at], h_score[child], h_rank[child]):
            return
        _swap(h_score, h_rank, h_doc, at, child)
        at = child


@numba.njit(nogil=True, cache=True)
def _offer(h_score, h_rank, h_doc, size, k, score, rank, doc):
    """Offer a hit to the heap of at most ``k``; returns the heap's new size."""
    if size < k:
        at = size
        h_score[at], h_rank[at], h_doc[at] = score, rank, doc
        size += 1
        while at > 0:  # sift up
            parent = (at - 1) // 2
            if not _better(h_score[parent], h_rank[parent], h_score[at], h_rank[at]):
                break
            _swap(h_score, h_rank, h_doc, at, parent)
            at = parent
        return size
    if _better(score, rank, h_score[0], h_rank[0]):
        h_score[0], h_rank[0], h_doc[0] = score, rank, doc
        _sift_down(h_score, h_rank, h_doc, size, 0)
    return size


@numba.njit(nogil=True, cache=True)
def _window_bounds(index, query, kind, pos, block, bound, low, high):
    """Each term's bound in ``[low, high)``: the largest score of its blocks that overlap the window (0: none). Moves
    each term's block (and posting) cursor to its first block that can hold a document of the window."""
    docs, _, _, _, block_last, block_key = index
    starts, ends, first_blocks, block_ends, weights = query
    for i in range(len(starts)):
        bound[i] = 0.0
        b = block[i]
        while b < block_ends[i] and block_last[b] < low:
            b += 1
        block[i] = b
        if b >= block_ends[i]:
            pos[i] = ends[i]
            continue
        pos[i] = max(pos[i], starts[i] + (b - first_blocks[i]) * BLOCK_SIZE)
        top = block_key[b] if docs[pos[i]] < high else np.float32(0)
        b += 1
        while b < block_ends[i] and block_last[b - 1] < high - 1:
            top = max(top, block_key[b])
            b += 1
        if top > 0:
            bound[i] = _score(kind, weights[i], top)


@numba.njit(nogil=True, cache=True)
def _essential_window(index, query, kind, order, essential, pos, low, high, acc, seen, touched):
    """Add the postings of the essential terms (``order[essential:]``) in ``[low, high)`` into the window's
    accumulator, term at a time; returns how many documents they touched (``touched[:count]``, window offsets)."""
    docs, freqs, norms, cache, _, _ = index
    _, ends, _, _, weights = query
    count = 0
    for j in range(essential, len(order)):
        i = order[j]
        p, end, w = pos[i], ends[i], weights[i]
        while p < end and docs[p] < low:
            p += 1
        while p < end and docs[p] < high:
            doc = docs[p]
            d = doc - low
            if not seen[d]:
                seen[d] = True
                acc[d] = 0.0
                touched[count] = d
                count += 1
            acc[d] += _score(kind, w, _key(kind, freqs[p], doc, norms, cache))
            p += 1
        pos[i] = p
    return count


@numba.njit(nogil=True, cache=True)
def _lookup(index, query, kind, i, pos, block, doc):
    """Term ``i``'s score for ``doc`` (0 when its postings lack it), its cursors moved up to ``doc``: whole blocks by
    their last doc, then posting by posting within the block."""
    docs, freqs, norms, cache, block_last, _ = index
    starts, ends, first_blocks, block_ends, weights = query
    b = block[i]
    while b < block_ends[i] and block_last[b] < doc:
        b += 1
    block[i] = b
    if b >= block_ends[i]:
        pos[i] = ends[i]
        return 0.0
    p = max(pos[i], starts[i] + (b - first_blocks[i]) * BLOCK_SIZE)
    while docs[p] < doc:
        p += 1
    pos[i] = p
    if docs[p] != doc:
        return 0.0
    return _score(kind, weights[i], _key(kind, freqs[p], doc, norms, cache))


@numba.njit(nogil=True, cache=True)
def top_k(index, query, kind, id_rank, k, max_doc, window=WINDOW):
    """The top ``k`` documents of one query: (doc numbers, float32 scores), in no particular order.

    ``index``: (docs, freqs, norms, cache, block_last, block_key), the postings and block maxima. ``query``: (starts,
    ends, first_blocks, block_ends, weights): term ``i`` owns postings ``starts[i]:ends[i]`` and blocks
    ``first_blocks[i]:block_ends[i]``; ``weights[i]`` is BM25's ``boost * idf`` or an impact's boost (float32)."""
    starts, ends, first_blocks = query[0], query[1], query[2]
    docs = index[0]
    n = len(starts)
    h_score, h_rank, h_doc = np.empty(k, np.float32), np.empty(k, np.int64), np.empty(k, np.int64)
    size, threshold = 0, np.float32(-np.inf)
    pos, block = starts.copy(), first_blocks.copy()
    bound, prefix = np.zeros(n, np.float64), np.zeros(n + 1, np.float64)
    acc, seen, touched = np.zeros(window, np.float64), np.zeros(window, np.bool_), np.empty(window, np.int64)
    low = max_doc
    for i in range(n):
        if pos[i] < ends[i]:
            low = min(low, docs[pos[i]])
    while low < max_doc:
        high = min(low + window, max_doc)
        _window_bounds(index, query, kind, pos, block, bound, low, high)
        order = np.argsort(bound)
        for j in range(n):
            prefix[j + 1] = prefix[j] + bound[order[j]]
        essential = 0  # terms order[:essential] are non-essential: alone they cannot reach the k-th score
        while essential < n and np.float32(prefix[essential + 1]) < threshold:
            essential += 1
        if essential < n:
            count = _essential_window(index, query, kind, order, essential, pos, low, high, acc, seen, touched)
            if essential > 0 and count > 1:
                touched[:count].sort()  # the non-essential cursors move forward only
            for c in range(count):
                d = touched[c]
                seen[d] = False
                s, doc = acc[d], low + d
                j = essential
                while j > 0 and np.float32(s + prefix[j]) >= threshold:
                    j -= 1
                    s += _lookup(index, query, kind, order[j], pos, block, doc)
                if np.float32(s + prefix[j]) < threshold:
                    continue
                score = np.float32(s)
                size = _offer(h_score, h_rank, h_doc, size, k, score, id_rank[doc], doc)
                if size == k:
                    threshold = h_score[0]
        # the next window starts at the next posting any term has left
        low = max_doc
        for i in range(n):
            if pos[i] < ends[i]:
                low = min(low, docs[pos[i]])
        low = max(low, high)
    return h_doc[:size], h_score[:size]
