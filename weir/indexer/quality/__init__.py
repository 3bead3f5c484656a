"""Passage quality estimation for static pruning: estimators by name, one module each behind
:class:`~weir.indexer.quality.base.QualityEstimator`.

- ``learned``: the QualT5 recipe on a truncated backbone (:mod:`weir.indexer.quality.learned`; shipped model
  ``models/quality-learned``, or any directory `weir train quality` wrote);
- ``surface``: LightGBM over surface features (:mod:`weir.indexer.quality.gbdt`; ``models/quality-surface``);
- ``length``, ``entropy``, ``stopwords``, ``punctuation``: one surface feature each (:mod:`weir.indexer.quality.surface`);
- ``duplicates``: exact and MinHash near-duplicates (:mod:`weir.indexer.quality.duplicates`);
- ``random``: seeded, the baseline (:mod:`weir.indexer.quality.random_scores`).

Pruning with them (which documents go, and what the index records) is :mod:`weir.indexer.quality.prune`.
"""

from __future__ import annotations

import json
from pathlib import Path

from weir.indexer.quality.base import QualityEstimator
from weir.core.runtime import shipped_model
from weir.core.types import InputError

SHIPPED = {"learned": "quality-learned", "surface": "quality-surface"}  # trained estimators: models/<dir>
ESTIMATORS = ("learned", "surface", "length", "entropy", "stopwords", "punctuation", "duplicates", "random")


def _trained(path: Path, device: str | None) -> QualityEstimator:
    card = path / "card.json"
    if not card.is_file():
        raise InputError(f"{path}: not a quality model (no card.json); train one with `weir train quality`")
    kind = json.loads(card.read_text(encoding="utf-8")).get("estimator")
    if kind == "learned":
        from weir.indexer.quality.learned import LearnedQuality

        return LearnedQuality(path, device=device)
    if kind == "surface":
        from weir.indexer.quality.gbdt import SurfaceModelQuality

        return SurfaceModelQuality(path)
    raise InputError(f"{path}: card.json names estimator {kind!r}; a quality model is 'learned' or 'surface'")


def open_estimator(name: str, *, seed: int = 0, device: str | None = None) -> QualityEstimator:
    """The estimator called ``name`` (one of :data:`ESTIMATORS`), or the trained one in the model directory
    ``name``."""
    if name in SHIPPED:
        return _trained(shipped_model(SHIPPED[name]), device)
    if name == "random":
        from weir.indexer.quality.random_scores import RandomQuality

        return RandomQuality(seed)
    if name == "duplicates":
        from weir.indexer.quality.duplicates import DuplicateQuality

        return DuplicateQuality()
    from weir.indexer.quality.surface import HEURISTICS, SurfaceHeuristic

    if name in HEURISTICS:
        return SurfaceHeuristic(name)
    if Path(name).is_dir():
        return _trained(Path(name), device)
    raise InputError(f"unknown quality estimator {name!r}; known: {', '.join(ESTIMATORS)}, or a model directory "
                     "written by `weir train quality`")
