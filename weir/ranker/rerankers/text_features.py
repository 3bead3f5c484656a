"""The text features of a query's candidates (:data:`TEXT_FEATURES`: lengths, term statistics, proximity, title
BM25; defined in :mod:`weir.ranker.rerankers.ltr_features`), from token ids, in one compiled pass per query.

Computed in Python a pair at a time (a ``Counter`` of the document's terms, a set of its bigrams, a dict of
positions), they took about 60% of the LTR features' time (py-spy) and held the GIL throughout: some 3.2 ms of a
`hybrid>>ltr` query's 7.4 on SciFact, while the server's other worker and its event loop waited. Here a document is its
analyzed terms as token ids (:class:`Tokens`: the BM25 component's term ordinals; a term the component does not
hold gets an id past them, the same for the same string), cached as small arrays instead of lists of strings, and
every candidate of a query is scored by one numba function that releases the GIL. No library computes these
features over token ids, so the kernel is written here; each feature is the same float as the Python definition
gives (the same operations on the same doubles, in the same order; sums run left to right over the query's unique
terms in their order, as Python's ``sum`` does), tested against that definition on real and generated text.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numba
import numpy as np

TEXT_FEATURES = ("doc_len", "title_len", "coverage", "idf_coverage", "matched_tf", "idf_sum", "idf_max", "idf_mean",
                 "matched_idf_max", "title_coverage", "title_bm25", "min_span", "bigram_match")


class Tokens:
    """Token ids of analyzed terms: the ordinal of a term in ``terms`` (a :class:`~weir.core.strings.StringTable`,
    the postings' terms). A document's term the table lacks (none should: the postings hold every term of the
    stored text) gets an id past them, the same for the same string (thread-safe); a query's term that neither holds
    gets a negative id of its own, which no document token has, so unknown query terms never fill a table."""

    def __init__(self, terms):
        self.terms = terms
        self._unknown: dict[str, int] = {}
        self._lock = threading.Lock()

    def of_document(self, words: Sequence[str]) -> np.ndarray:
        out = self._known(words)
        for i in np.flatnonzero(out < 0):
            with self._lock:
                out[i] = self._unknown.setdefault(words[i], len(self.terms) + len(self._unknown))
        return out.astype(np.int32)

    def of_query(self, words: Sequence[str]) -> np.ndarray:
        out = self._known(words)
        for i in np.flatnonzero(out < 0):
            out[i] = self._unknown.get(words[i], -2 - i)
        return out

    def _known(self, words: Sequence[str]) -> np.ndarray:
        return np.asarray(self.terms.find(list(words)), dtype=np.int64)


@numba.njit(nogil=True, cache=True)
def _positions(tokens, order, sorted_unique):
    """Each token's position among the unique query terms (-1: not a query term), by binary search."""
    out = np.full(len(tokens), -1, dtype=np.int64)
    at = np.searchsorted(sorted_unique, tokens)
    for i in range(len(tokens)):
        if at[i] < len(sorted_unique) and sorted_unique[at[i]] == tokens[i]:
            out[i] = order[at[i]]
    return out


@numba.njit(nogil=True, cache=True)
def _count(where, tf):
    """``tf``: how often each unique query term occurs among the tokens (``where``: their positions among them)."""
    tf[:] = 0
    for p in range(len(where)):
        if where[p] >= 0:
            tf[where[p]] += 1


@numba.njit(nogil=True, cache=True)
def _min_span(where, n_matched, u):
    """The length of the shortest window of tokens holding every matched query term (``where``: each token's
    position among the unique query terms, -1 for others); 0 when there is none."""
    have = np.zeros(u, dtype=np.int64)
    covered, left, best = 0, 0, 0
    for right in range(len(where)):
        j = where[right]
        if j < 0:
            continue
        if have[j] == 0:
            covered += 1
        have[j] += 1
        while covered == n_matched:
            while where[left] < 0:
                left += 1
            if best == 0 or right - left + 1 < best:
                best = right - left + 1
            jl = where[left]
            have[jl] -= 1
            if have[jl] == 0:
                covered -= 1
            left += 1
    return best


@numba.njit(nogil=True, cache=True)
def text_features(docs, doc_bounds, titles, title_bounds, unique, idf, seq, avg_title, k1, b):
    """:data:`TEXT_FEATURES` of each candidate (rows) of one query: ``docs``/``titles`` the candidates' token ids
    concatenated (candidate i: ``docs[doc_bounds[i]:doc_bounds[i + 1]]``), ``unique`` and ``idf`` the query's unique
    term ids and their idf, ``seq`` its terms as positions among them (first-seen order), ``avg_title`` the
    average title length of BM25 over titles, ``k1`` and ``b`` its parameters."""
    n, u, q = len(doc_bounds) - 1, len(unique), len(seq)
    out = np.zeros((n, 13))
    order = np.argsort(unique, kind="mergesort")
    sorted_unique = unique[order]
    idf_total, idf_max = 0.0, 0.0
    for j in range(u):
        idf_total += idf[j]
        if j == 0 or idf[j] > idf_max:
            idf_max = idf[j]
    tf = np.zeros(u, dtype=np.int64)
    title_tf = np.zeros(u, dtype=np.int64)
    for i in range(n):
        doc = docs[doc_bounds[i]:doc_bounds[i + 1]]
        title = titles[title_bounds[i]:title_bounds[i + 1]]
        where = _positions(doc, order, sorted_unique)
        _count(where, tf)
        _count(_positions(title, order, sorted_unique), title_tf)
        n_matched, occurrences, in_title, matched_idf, matched_max = 0, 0, 0, 0.0, 0.0
        for j in range(u):
            occurrences += tf[j]
            if tf[j]:
                matched_idf += idf[j]
                if n_matched == 0 or idf[j] > matched_max:
                    matched_max = idf[j]
                n_matched += 1
            if title_tf[j]:
                in_title += 1
        out[i, 0] = len(doc)
        out[i, 1] = len(title)
        if u:
            out[i, 2] = n_matched / u
            out[i, 7] = idf_total / u
            out[i, 9] = in_title / u
        if idf_total > 0:
            out[i, 3] = matched_idf / idf_total
        if len(doc):
            out[i, 4] = occurrences / len(doc)
        out[i, 5] = idf_total
        out[i, 6] = idf_max
        out[i, 8] = matched_max
        if len(title):
            bm25 = 0.0
            for s in range(q):
                t = title_tf[seq[s]]
                if t > 0:
                    bm25 += idf[seq[s]] * t / (t + k1 * (1.0 - b + b * len(title) / max(avg_title, 1e-9)))
            out[i, 10] = bm25
        if n_matched >= 2:
            span = _min_span(where, n_matched, u)
            out[i, 11] = n_matched / span
        if q > 1:
            out[i, 12] = _bigrams_found(where, seq, u) / (q - 1)
    return out


@numba.njit(nogil=True, cache=True)
def _bigrams_found(where, seq, u):
    """How many of the query's adjacent term pairs (``seq``, repeats counted) occur adjacent, in order, in the
    document (``where``: its tokens' positions among the query's ``u`` unique terms)."""
    codes = np.empty(max(len(where) - 1, 0), dtype=np.int64)
    m = 0
    for p in range(len(where) - 1):
        if where[p] >= 0 and where[p + 1] >= 0:
            codes[m] = where[p] * u + where[p + 1]
            m += 1
    codes = np.sort(codes[:m])
    found = 0
    for s in range(len(seq) - 1):
        at = np.searchsorted(codes, seq[s] * u + seq[s + 1])
        if at < m and codes[at] == seq[s] * u + seq[s + 1]:
            found += 1
    return found
