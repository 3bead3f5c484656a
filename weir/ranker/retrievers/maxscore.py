"""Rank-safe dynamic pruning for the in-process sparse engine: block-max MaxScore, document at a time.

The exhaustive engine (:class:`weir.ranker.retrievers.inverted.InvertedIndex` with ``exhaustive=True``) adds every
posting of every query term into an accumulator over the whole collection, so its cost grows with the collection even
at k=10. This kernel skips what cannot reach the top k, as Lucene (block-max MaxScore since 9.x) and PISA do, and
gives the same hits and the same float scores. It is PISA's ``block_max_maxscore`` (Mallia et al., "PISA",
OSIRRC 2019; MaxScore of Turtle and Flood 1995, block maxima of Ding and Suel 2011) over weir's uncompressed arrays:

- each term's postings are cut into blocks of :data:`BLOCK_SIZE` postings; per block the last doc number and the
  largest score are kept, per term the largest of its blocks (:class:`BlockMaxima`, derived once from a similarity's
  precomputed scores);
- terms are sorted by their largest score; the first ones, whose largest scores sum (in double, cast to float as a
  score is) below the current k-th score, are *non-essential*: a document only they match cannot enter the top k.
  The set grows as the k-th score rises;
- documents are visited in doc order over the essential terms' postings (their scores summed as the document is
  reached); each then looks up the non-essential terms, best first, only while its score plus the largest scores
  left could still reach the k-th score, and skips a term's lookup, and the document, when even the largest score of
  the term's block that holds the document cannot bring it there. While a single term is essential, its blocks whose
  largest score cannot lift a document there are skipped whole;
- the top k is a heap ordered as the exhaustive engine orders hits: score, then the rank of the collection id;
- the k-th score starts at a floor rather than at nothing: per term, the L-th largest of its blocks' largest scores
  (L the smallest of :data:`FLOOR_LEVELS` at least k) is the score of L distinct documents for that term alone, so
  at least k documents score at least the largest such floor among the query's terms (threshold estimation, Petri et
  al., "Accelerated query processing via similarity score prediction", SIGIR 2019, here from block maxima and safe).
  The kernel with its floors and without, in one process, which runs first alternating query by query (1,000
  synthetic queries): 8.8M passages k=1000 6.92 against 7.41 ms, 1M 1.45 against 1.70; at k=10 no gain (2.55
  against 2.58, 0.42 against 0.43).

Exactness: every term score is at least 0, and adding one to a float sum never lowers it (rounding is monotone), so a
document's score is at least each of its term scores, and the floor is at most the final k-th score. A bound is a sum
of block maxima in double, so it is at least the double sum of the document's term scores, and rounding to float is
monotone: a document is dropped only when ``float32(bound) < kth_score``, which it can then neither beat nor tie.
Equal scores are therefore always compared by id, as the oracle does. A document's score is the double sum of its
float term scores, as Lucene's disjunction sums them; a few floats sum exactly in double, so the order of the terms
does not change it.

It replaced MaxScore over windows of 8,192 doc numbers (the essential terms added term at a time into a window
accumulator, blocks of 128): over 8.8M synthetic passages, one thread, 3.6 ms a query at k=10 and 8.4 at k=1000,
where Lucene takes 6.5 and 19.2 and PISA over the same postings 5.5 and 9.3; the kernels alone, side by side, 2.6
against 7.9 ms at k=10 (``bench/scale.py``, whose docstring also has what each change gave).

Why by hand: no library runs MaxScore over Lucene's postings with Lucene's arithmetic; PISA and Lucene each score their
own index through their own process or bridge. The kernel is compiled by numba (a wheel from PyPI, no toolchain on
the user's machine), ``nogil=True``, so queries answered on several threads use several cores.
"""

from __future__ import annotations

import numba
import numpy as np

BLOCK_SIZE = 16  # postings per block of maxima: 8.8M passages, k=10, before the helpers took arrays: 4.9 ms, 5.1-5.3
# at 32, 5.6 at 64, 4.8 at 8 (bench/scale.py's docstring)


BM25, IMPACT = 0, 1  # the similarities the kernel scores with
FLOOR_LEVELS = (10, 100, 1000)  # the k for which each term's floor key is kept (BlockMaxima.floor_key)


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
def _floor_keys(first_block, max_key, terms, levels, floor_key):
    """Per level L and term of ``terms`` (those of at least ``levels[0]`` blocks), the L-th largest of the term's
    block keys (0: fewer blocks than L)."""
    for j in range(len(terms)):
        keys = np.sort(max_key[first_block[terms[j]]:first_block[terms[j] + 1]])
        for level in range(len(levels)):
            if len(keys) >= levels[level]:
                floor_key[level, j] = keys[len(keys) - levels[level]]


@numba.njit(nogil=True, cache=True)
def _block_maxima(offsets, docs, freqs, norms, cache, kind, first_block, last_doc, max_key, term_key):
    for t in range(len(offsets) - 1):
        b = first_block[t]
        term_top = np.float32(0)
        for start in range(offsets[t], offsets[t + 1], BLOCK_SIZE):
            end = min(start + BLOCK_SIZE, offsets[t + 1])
            top = np.float32(0)
            for p in range(start, end):
                k = _key(kind, freqs[p], docs[p], norms, cache)
                if k > top:
                    top = k
            last_doc[b] = docs[end - 1]
            max_key[b] = top
            term_top = max(term_top, top)
            b += 1
        term_key[t] = term_top


class BlockMaxima:
    """Per term its blocks (``first_block[t]:first_block[t + 1]``) and its largest key (``term_key``); per block
    its last doc number and its largest key (:func:`_key`), from which the block's largest score at any query weight
    follows; for the terms of at least 10 blocks (``floor_terms``, 50k of 2.6M at 8.8M passages), per k of
    :data:`FLOOR_LEVELS` the k-th largest of their blocks' keys (``floor_key``, 0 for a term of fewer blocks). One pass
    over the postings (2.1-3.4 s for 336M postings, the floors 0.75-0.84 s of that), made when an engine is opened:
    BM25's keys depend on k1, b and the collection statistics (a shard scores with its shard set's), so they are not
    stored with the index."""

    def __init__(self, offsets: np.ndarray, docs: np.ndarray, freqs: np.ndarray, norms: np.ndarray,
                 cache: np.ndarray, kind: int):
        blocks = (np.diff(offsets) + BLOCK_SIZE - 1) // BLOCK_SIZE
        self.first_block = np.zeros(len(blocks) + 1, dtype=np.int64)
        np.cumsum(blocks, out=self.first_block[1:])
        total = int(self.first_block[-1])
        self.last_doc = np.empty(total, dtype=np.int32)
        self.max_key = np.empty(total, dtype=np.float32)
        self.term_key = np.zeros(len(blocks), dtype=np.float32)
        _block_maxima(offsets, docs, freqs, norms, cache.astype(np.float32), kind, self.first_block, self.last_doc,
                      self.max_key, self.term_key)
        self.floor_terms = np.flatnonzero(blocks >= FLOOR_LEVELS[0])
        self.floor_key = np.zeros((len(FLOOR_LEVELS), len(self.floor_terms)), dtype=np.float32)
        _floor_keys(self.first_block, self.max_key, self.floor_terms, np.array(FLOOR_LEVELS), self.floor_key)

    def floor_keys(self, terms: np.ndarray, k: int) -> np.ndarray:
        """The floor keys of ``terms`` for a top ``k`` (0: no floor)."""
        level = next((i for i, top in enumerate(FLOOR_LEVELS) if k <= top), None)
        if level is None or not len(self.floor_terms):
            return np.zeros(len(terms), dtype=np.float32)
        at = np.minimum(np.searchsorted(self.floor_terms, terms), len(self.floor_terms) - 1)
        return np.where(self.floor_terms[at] == terms, self.floor_key[level, at], np.float32(0))

    @property
    def nbytes(self) -> int:
        arrays = (self.first_block, self.last_doc, self.max_key, self.term_key, self.floor_terms, self.floor_key)
        return sum(a.nbytes for a in arrays)


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
    """Put a hit into the heap of at most ``k``, in place of its worst when full: the caller has checked that it beats
    that one (a check where the hit is found saves a call, with its arrays, for every hit that does not get in);
    returns the heap's new size."""
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
    h_score[0], h_rank[0], h_doc[0] = score, rank, doc
    _sift_down(h_score, h_rank, h_doc, size, 0)
    return size


@numba.njit(nogil=True, cache=True)
def _find(docs, freqs, norms, cache, kind, weight, p, doc):
    """From posting ``p`` of a term, the first posting at or past ``doc`` and the term's score for ``doc`` (0 when its
    postings lack it)."""
    while docs[p] < doc:
        p += 1
    if docs[p] == doc:
        return p, _score(kind, weight, _key(kind, freqs[p], doc, norms, cache))
    return p, 0.0


@numba.njit(nogil=True, cache=True)
def _past(block_key, kind, weight, b, end, rest, threshold):
    """The first of a term's blocks ``b:end`` whose largest score plus ``rest`` can reach ``threshold`` (``end``:
    none)."""
    while b < end and np.float32(_score(kind, weight, block_key[b]) + rest) < threshold:
        b += 1
    return b


@numba.njit(nogil=True, cache=True)
def _first_block_reaching(block_last, b, end, doc):
    """The first of blocks ``b:end`` whose last doc is at least ``doc`` (``end``: none), by galloping from ``b``, then
    bisecting: a lookup often lands many blocks further on (8.8M passages, k=10: 2.63 ms against 2.76 block by
    block)."""
    if b >= end or block_last[b] >= doc:
        return b
    step = 1
    while b + step < end and block_last[b + step] < doc:  # block_last[b] < doc holds
        b += step
        step *= 2
    low, high = b + 1, min(b + step, end)
    while low < high:
        middle = (low + high) // 2
        if block_last[middle] < doc:
            low = middle + 1
        else:
            high = middle
    return low


@numba.njit(nogil=True, cache=True)
def _term_order(docs, starts, kind, weights, term_keys, floor_keys, max_doc):
    """The terms by their largest score, least first, the running sums of those scores (``prefix[j]``: the largest
    score a document can get from terms ``order[:j]``), the first document any term has, the floor of the k-th
    score (the largest term floor; -inf without one) and how many terms are non-essential from the start (the floor
    is at most a term's largest score, so one term at least stays essential)."""
    n = len(weights)
    top = np.empty(n, np.float64)
    first, floor = max_doc, np.float32(-np.inf)
    for i in range(n):
        top[i] = _score(kind, weights[i], term_keys[i])
        first = min(first, docs[starts[i]])
        if floor_keys[i] > 0:
            floor = max(floor, np.float32(_score(kind, weights[i], floor_keys[i])))
    order = np.argsort(top)
    prefix = np.zeros(n + 1, np.float64)
    for j in range(n):
        prefix[j + 1] = prefix[j] + top[order[j]]
    essential = 0
    while essential < n - 1 and np.float32(prefix[essential + 1]) < floor:
        essential += 1
    return order, prefix, first, floor, essential


@numba.njit(nogil=True, cache=True)
def top_k(index, query, kind, id_rank, k, max_doc):
    """The top ``k`` documents of one query: (doc numbers, float32 scores), in no particular order. ``index``:
    (docs, freqs, norms, cache, block_last, block_key); ``query``: (starts, ends, first_blocks, block_ends, weights,
    term_keys, floor_keys) with the floor keys for this k. Helpers called per document take few arrays, never these
    tuples: a call given the tuples per lookup made the search twice as slow at 8.8M passages (measured; what numba
    does with them was not examined)."""
    docs, freqs, norms, cache, block_last, block_key = index
    starts, ends, first_blocks, block_ends, weights, term_keys, floor_keys = query
    n, size, pos, block = len(starts), 0, starts.copy(), first_blocks.copy()
    h_score, h_rank, h_doc = np.empty(k, np.float32), np.empty(k, np.int64), np.empty(k, np.int64)
    # terms order[:essential] are non-essential: alone they cannot reach the k-th score
    order, prefix, doc, threshold, essential = _term_order(docs, starts, kind, weights, term_keys, floor_keys, max_doc)
    while doc < max_doc:
        if essential == n - 1:  # one essential term: past its blocks whose documents cannot get in
            i = order[essential]
            b = first_blocks[i] + (pos[i] - starts[i]) // BLOCK_SIZE
            past = block_ends[i] if pos[i] == ends[i] else _past(block_key, kind, weights[i], b, block_ends[i],
                                                                   prefix[essential], threshold)
            if past == block_ends[i]:
                break
            pos[i] = max(pos[i], starts[i] + (past - first_blocks[i]) * BLOCK_SIZE)
            doc = docs[pos[i]]
        score, following = 0.0, max_doc
        for j in range(essential, n):  # the essential terms' postings of doc, and the next doc any of them has
            i = order[j]
            p = pos[i]
            if p < ends[i]:
                d = docs[p]
                if d == doc:
                    score += _score(kind, weights[i], _key(kind, freqs[p], d, norms, cache))
                    pos[i] = p = p + 1
                    d = docs[p] if p < ends[i] else max_doc
                following = min(following, d)
        j, alive = essential, True  # the non-essential terms, best first, while doc can still get in
        while j > 0 and np.float32(score + prefix[j]) >= threshold:
            j -= 1
            i = order[j]
            block[i] = b = _first_block_reaching(block_last, block[i], block_ends[i], doc)
            if b == block_ends[i]:  # no posting of the term left: it adds nothing
                continue
            if np.float32(score + _score(kind, weights[i], block_key[b]) + prefix[j]) < threshold:
                alive = False  # not even with the largest score of the term's block that holds doc
                break
            start = max(pos[i], starts[i] + (b - first_blocks[i]) * BLOCK_SIZE)
            pos[i], found = _find(docs, freqs, norms, cache, kind, weights[i], start, doc)
            score += found
        if alive and np.float32(score + prefix[j]) >= threshold:
            rank = id_rank[doc]  # read for the documents that reach the k-th score only: a random access
            if size == k and not _better(np.float32(score), rank, h_score[0], h_rank[0]):
                doc = following
                continue
            size = _offer(h_score, h_rank, h_doc, size, k, np.float32(score), rank, doc)
            if size == k:
                threshold = h_score[0]
                while essential < n and np.float32(prefix[essential + 1]) < threshold:
                    essential += 1
                if essential == n:
                    break
        doc = following
    return h_doc[:size], h_score[:size]
