"""``random``: the baseline every quality estimator must beat. A document's score is a uniform draw keyed by the seed
and its id (blake2b), so it depends on nothing else: not on the corpus order, not on the other documents."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from weir.indexer.quality.base import QualityEstimator
from weir.core.types import Document


class RandomQuality(QualityEstimator):
    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = int(seed)

    def describe(self) -> dict:
        return {"name": self.name, "seed": self.seed, "draw": "blake2b(seed, id) / 2**64"}

    def score(self, documents: Sequence[Document], *, progress: bool = False) -> np.ndarray:
        key = str(self.seed).encode()
        return np.array([int.from_bytes(hashlib.blake2b(d.id.encode(), digest_size=8, key=key).digest(), "big")
                         / 2.0**64 for d in documents], dtype=np.float64)
