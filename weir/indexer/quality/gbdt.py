"""``surface``: a LightGBM classifier over the surface features (:mod:`weir.indexer.quality.surface`), the middle ground
between the single-feature heuristics and the learned estimator: no neural model, thousands of passages a second,
trained by `weir train quality --estimator surface` on the same data as the learned one.

A model directory holds ``card.json`` (kind ``quality``, estimator ``surface``) and ``model.txt`` (the booster); the
score is the booster's raw margin.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from weir.indexer.quality.base import QualityEstimator, standardized_within, within_collection
from weir.indexer.quality.surface import FEATURES, feature_matrix
from weir.core.provenance import sha256_file
from weir.core.types import Document, InputError

CARD, MODEL = "card.json", "model.txt"


class SurfaceModelQuality(QualityEstimator):
    name = "surface"

    def __init__(self, path: str | os.PathLike):
        import lightgbm as lgb

        self.path = Path(path)
        if not (self.path / CARD).is_file() or not (self.path / MODEL).is_file():
            raise InputError(f"{self.path}: not a surface quality model (needs {CARD} and {MODEL}); train one with "
                             "`weir train quality --estimator surface`")
        self.model_card = json.loads((self.path / CARD).read_text(encoding="utf-8"))
        if list(self.model_card.get("features", [])) != list(FEATURES):
            raise InputError(f"{self.path}: trained on features {self.model_card.get('features')}, this weir computes "
                             f"{list(FEATURES)}; train it again")
        self.booster = lgb.Booster(model_file=str(self.path / MODEL))
        self.within = within_collection(self.model_card)
        self.per_document = not self.within  # standardized within the corpus: a score depends on all of it

    def describe(self) -> dict:
        return {"name": self.name, "model": self.path.name, "card_sha256": sha256_file(self.path / CARD),
                "model_sha256": sha256_file(self.path / MODEL)}

    def margins(self, surface: np.ndarray) -> np.ndarray:
        """The booster's raw margins of these documents' surface features (one whole corpus when ``within``)."""
        if self.within:
            surface = standardized_within(surface)
        return np.asarray(self.booster.predict(surface, raw_score=True, num_threads=1), dtype=np.float64)

    def score(self, documents: Sequence[Document], *, progress: bool = False) -> np.ndarray:
        if not documents:
            return np.zeros(0)
        return self.margins(feature_matrix(documents, progress=progress))
