"""Surface features of a passage, computed from its characters and words alone (no model, tens of thousands of
passages a second), and the single-feature estimators built on them: ``length``, ``entropy``, ``stopwords``,
``punctuation``.

These are the cheap baselines of static pruning: a passage that is very short, a list of numbers, boilerplate with
few function words or a repetition of one phrase is rarely what a query wants. Each single-feature estimator scores
by one feature in the direction stated in :data:`HEURISTICS`; the LightGBM estimator (:mod:`weir.indexer.quality.gbdt`)
and the learned one (:mod:`weir.indexer.quality.learned`) read all of them. Written by hand because they are a few lines
of counting each; the words are weir's (:func:`weir.indexer.weighting.terms.words`), the stopwords Lucene's English set
(the analyzer of weir's BM25 index).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
from tqdm import tqdm

from weir.indexer.quality.base import QualityEstimator
from weir.indexer.weighting.terms import words
from weir.core.types import Document

# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (Anserini's default English analyzer)
STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with".split())

FEATURES = ("log_words", "log_chars", "stopword_ratio", "punctuation_ratio", "digit_ratio", "upper_ratio",
            "entropy", "unique_ratio", "mean_word_length", "top_word_share", "title_words")


def features(doc: Document) -> list[float]:
    """The values of :data:`FEATURES` for one document (title and text, BEIR's flat contents)."""
    text = doc.contents
    ws = [w.lower() for w in words(text)]
    n, chars = len(ws), max(len(text), 1)
    counts = Counter(ws)
    entropy = -sum(c / n * math.log2(c / n) for c in counts.values()) if n else 0.0
    letters_digits = sum(ch.isalnum() for ch in text)
    spaces = sum(ch.isspace() for ch in text)
    return [
        math.log1p(n),
        math.log1p(len(text)),
        sum(counts[s] for s in STOPWORDS.intersection(counts)) / n if n else 0.0,
        (chars - letters_digits - spaces) / chars,
        sum(ch.isdigit() for ch in text) / chars,
        sum(ch.isupper() for ch in text) / chars,
        entropy,
        len(counts) / n if n else 0.0,
        sum(len(w) for w in ws) / n if n else 0.0,
        max(counts.values()) / n if n else 0.0,
        float(len(words(doc.title))),
    ]


def feature_matrix(documents: Sequence[Document], *, progress: bool = False) -> np.ndarray:
    """float64 (documents, len(FEATURES))."""
    rows = tqdm(documents, desc="surface features", unit="doc", disable=not progress, mininterval=1.0)
    return np.array([features(d) for d in rows], dtype=np.float64).reshape(len(documents), len(FEATURES))


# estimator name -> (feature, direction): the score is direction * feature
HEURISTICS = {
    "length": ("log_words", 1.0),          # longer passages carry more
    "entropy": ("entropy", 1.0),           # varied vocabulary, not one phrase repeated
    "stopwords": ("stopword_ratio", 1.0),  # running prose has function words; lists and boilerplate have few
    "punctuation": ("punctuation_ratio", -1.0),  # markup, tables and symbol noise are mostly punctuation
}


class SurfaceHeuristic(QualityEstimator):
    """One surface feature as the score (see :data:`HEURISTICS`)."""

    def __init__(self, name: str):
        self.name = name
        self.feature, self.direction = HEURISTICS[name]
        self._column = FEATURES.index(self.feature)

    def describe(self) -> dict:
        return {"name": self.name, "feature": self.feature, "direction": self.direction,
                "features": list(FEATURES)}

    def score(self, documents: Sequence[Document], *, progress: bool = False) -> np.ndarray:
        return self.direction * feature_matrix(documents, progress=progress)[:, self._column]
