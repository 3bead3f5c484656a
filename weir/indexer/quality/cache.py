"""Quality scores cached per corpus, so that a sweep over fractions and a rebuild score the corpus once.

Scores live under ``$WEIR_CACHE/quality/`` (default ``~/.cache/weir/quality``) in one directory per (collection
fingerprint, estimator card hash): ``scores.npy`` (float64, corpus order), ``docids.txt`` and ``meta.json`` (the
estimator's card, the time scoring took, passages per second, and the score quantiles 0, 0.01, ..., 1, as
pyterrier-quality's score cache keeps them). A cache entry whose document ids differ from the corpus's is ignored.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from weir.indexer.quality.base import QualityEstimator
from weir.core.provenance import write_json
from weir.core.runtime import cache_dir
from weir.core.types import Document

QUANTILES = np.round(np.linspace(0, 1, 101), 2)


def cache_root() -> Path:
    return cache_dir("quality")


def entry(collection_sha256: str, estimator: QualityEstimator) -> Path:
    return cache_root() / f"{collection_sha256[:24]}-{estimator.name}-{estimator.card_sha256[:16]}"


def quantiles(scores: np.ndarray) -> dict[str, float]:
    if not len(scores):
        return {}
    return {f"{q:.2f}": float(v) for q, v in zip(QUANTILES, np.quantile(scores, QUANTILES))}


def read(path: Path, docids: Sequence[str]) -> tuple[np.ndarray, dict] | None:
    """The cached scores at ``path`` if they are for exactly these documents."""
    if not (path / "meta.json").is_file():
        return None
    try:
        cached_ids = (path / "docids.txt").read_text(encoding="utf-8").split("\n")[:-1]
        if cached_ids != list(docids):
            return None
        return np.load(path / "scores.npy"), json.loads((path / "meta.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write(path: Path, docids: Sequence[str], scores: np.ndarray, meta: dict) -> None:
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    np.save(tmp / "scores.npy", scores)
    (tmp / "docids.txt").write_text("".join(d + "\n" for d in docids), encoding="utf-8")
    write_json(tmp / "meta.json", meta)
    if path.exists():  # another process wrote it meanwhile: same key, same scores
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        return
    os.replace(tmp, path)


def scores_for(estimator: QualityEstimator, documents: Sequence[Document], collection_sha256: str | None, *,
               progress: bool = True, use_cache: bool = True) -> tuple[np.ndarray, dict]:
    """The estimator's scores of ``documents`` (from the cache when there, else computed and, with a fingerprint,
    cached) and a record: card, seconds, passages/s, quantiles, whether they came from the cache."""
    docids = [d.id for d in documents]
    path = entry(collection_sha256, estimator) if collection_sha256 and use_cache else None
    if path is not None and (hit := read(path, docids)) is not None:
        scores, meta = hit
        return scores, {**meta, "cached": True}
    start = time.perf_counter()
    scores = np.asarray(estimator.score(documents, progress=progress), dtype=np.float64)
    seconds = time.perf_counter() - start
    if scores.shape != (len(documents),) or not np.isfinite(scores).all():
        raise ValueError(f"quality estimator {estimator.name} gave {scores.shape} scores (finite: "
                         f"{bool(np.isfinite(scores).all())}) for {len(documents)} documents")
    meta = {"estimator": estimator.card, "card_sha256": estimator.card_sha256, "documents": len(documents),
            "seconds": round(seconds, 3), "passages_per_second": round(len(documents) / max(seconds, 1e-9), 1),
            "quantiles": quantiles(scores)}
    if path is not None:
        write(path, docids, scores, meta)
    return scores, {**meta, "cached": False}
