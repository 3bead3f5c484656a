"""What every passage-quality estimator is: ``score(documents)`` -> one float per document, higher is better.

Static pruning (Chang, Mishra, Macdonald and MacAvaney, SIGIR 2024) scores every passage once, with no query, and
drops the lowest-scored ones before the expensive index steps. An estimator here is deterministic (the same
documents always get the same scores), and describes itself with a ``card``: what it is, its parameters and, for a
trained one, its model files' hashes; ``card_sha256`` keys the per-corpus score cache (:mod:`weir.indexer.quality.cache`)
and is recorded in the manifest of a pruned index.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from functools import cached_property

import numpy as np

from weir.core.types import Document, InputError


STANDARDIZE = ("sources", "collection")  # what a trained estimator's inputs are standardized by


def standardized_within(x: np.ndarray) -> np.ndarray:
    """Each column of ``x`` (one row per document of one corpus) standardized by that corpus's own mean and standard
    deviation: what a trained estimator with ``standardize = "collection"`` reads, so that it sees a passage against
    the collection it is in (longer than its neighbours, unusual words for them), not its absolute length or words,
    which differ more between collections than within one."""
    x = np.asarray(x, dtype=np.float64)
    return ((x - x.mean(axis=0)) / (x.std(axis=0) + 1e-6)).astype(np.float32)


def within_collection(card: dict) -> bool:
    """Whether a trained estimator's card says it standardizes its inputs within the corpus it scores."""
    value = (card.get("parameters") or {}).get("standardize", "sources")
    if value not in STANDARDIZE:
        raise InputError(f"unknown standardize {value!r} on a quality model's card; known: {', '.join(STANDARDIZE)}")
    return value == "collection"


class QualityEstimator(ABC):
    """A query-agnostic passage quality score; subclasses set ``name`` and implement :meth:`score` (and
    :meth:`describe` for their parameters)."""

    name = "quality"
    # whether a document's score depends on that document alone, so that blocks of the corpus may be scored apart
    # (on the workers of a distributed build, :mod:`weir.indexer.distributed`) and give the whole corpus's scores
    per_document = True
    # blocks scored apart give the whole corpus's scores to the bit only when each holds a multiple of this many
    # documents (a neural estimator's batches are sorted by length within chunks of that many)
    batch_unit = 1
    # runs a neural model: on a cluster with GPUs its workers take one each
    neural = False

    @abstractmethod
    def score(self, documents: Sequence[Document], *, progress: bool = False) -> np.ndarray:
        """float64 scores, one per document, in order; higher means more likely relevant to some query. The whole
        corpus comes in one call (an estimator may compare documents with each other, as near-duplicate detection
        does); ``progress`` shows a bar."""

    def describe(self) -> dict:
        """The estimator's card: name and parameters (trained estimators add their model card)."""
        return {"name": self.name}

    @cached_property
    def card(self) -> dict:
        return self.describe()

    @cached_property
    def card_sha256(self) -> str:
        """sha256 of the canonical JSON of :attr:`card`: what keys cached scores and what a manifest records."""
        return hashlib.sha256(json.dumps(self.card, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
