"""The word-level tokenization shared by the document side and the query side of learned term weighting.

A text is split into words on non-alphanumeric characters (``[^\\W_]+``, Unicode-aware); each word is then analyzed
alone by Anserini's default English analyzer (lowercase, Lucene's English stopwords, Porter stemming), the analyzer
of weir's BM25 index. A word yields zero terms (a stopword), one term, or rarely more. Documents go through
:func:`word_terms`, so a term written to a ``--pretokenized`` Lucene index is exactly the term a query produces. Word
analysis is memoized per process (a corpus has far fewer distinct words than words); the words of a text not known
yet are analyzed together, in one crossing into the JVM rather than one per word (a third of a cold ``deepct`` run's
time went to those crossings), and give the terms each gives alone (:func:`_learn`; checked on the first 300
queries of every shared collection and on SciFact passages).
"""

from __future__ import annotations

import re
import threading
from collections import Counter

_WORD = re.compile(r"[^\W_]+")
_cache: dict[str, tuple[str, ...]] = {}
_lock = threading.Lock()
_analyze = None


def words(text: str) -> list[str]:
    """The words of ``text``, in order: maximal runs of letters and digits."""
    return _WORD.findall(text)


def word_starts(text: str) -> list[int]:
    """Where each word of :func:`words` starts in ``text`` (a character offset)."""
    return [m.start() for m in _WORD.finditer(text)]


def _analyzer():
    global _analyze
    if _analyze is None:
        with _lock:
            if _analyze is None:
                from weir.core import jvm

                jvm.ensure()
                from jnius import autoclass

                analyzer = autoclass("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
                utils = autoclass("io.anserini.analysis.AnalyzerUtils")
                _analyze = lambda word: tuple(utils.analyze(analyzer, word).toArray())  # noqa: E731
    return _analyze


MARK = "weirwordbreak"  # a word between words analyzed in one call; its term ends in "k", which no Porter rewrite
# of a suffix makes, so only a word that contains MARK could yield it (such a word is analyzed alone)


def _remember(word: str, found: tuple[str, ...]) -> None:
    if len(_cache) < 2_000_000:
        _cache[word] = found


def analyze_word(word: str) -> tuple[str, ...]:
    """The terms of one word (``()`` for a stopword); memoized."""
    found = _cache.get(word)
    if found is None:
        from weir.core import jvm

        with jvm.lock:
            found = tuple(_analyzer()(word))
        _remember(word, found)
    return found


def _learn(ws: list[str]) -> None:
    """Memoize the terms of the words of ``ws`` not known yet, in one call of the analyzer over them joined by MARK
    (each word's terms are those between two marks: the tokenizer breaks at a space and the filters see one token at
    a time). A word containing MARK, or a result that does not split into one group per word, goes word by word."""
    new = [w for w in dict.fromkeys(ws) if w not in _cache]
    if len(new) < 2 or any(MARK in w.lower() for w in new):
        for w in new:
            analyze_word(w)
        return
    from weir.core import jvm

    with jvm.lock:
        found = _analyzer()(f" {MARK} ".join(new))
    groups: list[list[str]] = [[]]
    for t in found:
        if t == MARK:
            groups.append([])
        else:
            groups[-1].append(t)
    if len(groups) != len(new):
        for w in new:
            analyze_word(w)
        return
    for w, g in zip(new, groups):
        _remember(w, tuple(g))


def word_terms(text: str) -> tuple[list[str], list[tuple[int, str]]]:
    """``(words, [(word index, term), ...])``: every term of ``text`` with the word it came from, in text order."""
    ws = words(text)
    _learn(ws)
    return ws, [(i, t) for i, w in enumerate(ws) for t in analyze_word(w)]


def terms(text: str) -> list[str]:
    """All terms of ``text`` in order (repeats kept)."""
    return [t for _, t in word_terms(text)[1]]


def unique_terms(text: str) -> list[str]:
    """The distinct terms of ``text`` in order of first occurrence: a query's terms (each with weight 1)."""
    return list(dict.fromkeys(terms(text)))


def query_weights(text: str, counts: bool) -> dict[str, int]:
    """A query's term weights: each term's count in the query (BM25's bag of words, as Lucene scores a boolean query
    of term queries with repeats) or 1 per unique term (the published DeepImpact)."""
    found = terms(text)
    return dict(Counter(found)) if counts else dict.fromkeys(found, 1)


def counts_query_terms(kind: str, shape: str | None) -> bool:
    """Whether a head's queries weigh each term by its count: DeepCT always (BM25 over pseudo-documents); DeepImpact
    when BM25-shaped (its untrained head is then exactly BM25, long queries included), else 1 per unique term."""
    return kind == "deepct" or shape == "bm25"
