"""Static pruning in the index build: which documents go, and what the index directory keeps about it.

A pruning is an estimator and either a fraction (``learned:0.25``: the ``floor(0.25 * N + 1/2)`` lowest-scored of the
``N`` documents go) or a threshold (documents scoring below it go). Ties are broken by document id (the smaller id,
in string order, goes first), so a pruning is a function of the scores and ids alone and a rebuild prunes the same
documents. Scores come from the per-corpus cache when present (:mod:`weir.indexer.quality.cache`).

The index directory keeps ``quality/``: ``scores.npy`` (every scored document's score, float64, corpus order),
``docids.txt`` (those documents' ids) and ``pruned.txt`` (the ids that were left out, one a line); its manifest entry
``pruning`` records the estimator, its card hash, the fraction or threshold, the counts and the scoring cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from weir.core.types import InputError

DIRECTORY = "quality"
TIE_BREAK = "lowest score first; equal scores: the smaller document id (string order) first"


@dataclass(frozen=True)
class PruneSpec:
    """What to prune: ``estimator`` (a name or a model directory) with a ``fraction`` in [0, 1) or a
    ``threshold``; ``seed`` for ``random``."""

    estimator: str
    fraction: float | None = None
    threshold: float | None = None
    seed: int = 0

    @classmethod
    def parse(cls, text: str, *, threshold: bool = False, seed: int = 0) -> PruneSpec:
        """``ESTIMATOR:FRACTION`` (``--prune learned:0.25``) or, with ``threshold``, ``ESTIMATOR:SCORE``
        (``--prune-threshold surface:-1.5``)."""
        name, sep, value = text.rpartition(":")
        what = "a score threshold" if threshold else "the fraction to prune, in [0, 1)"
        if not sep or not name.strip():
            form = "ESTIMATOR:SCORE, e.g. surface:-1.5" if threshold else "ESTIMATOR:FRACTION, e.g. learned:0.25"
            raise InputError(f"--prune{'-threshold' if threshold else ''} {text!r}: expected {form}")
        try:
            number = float(value)
        except ValueError:
            raise InputError(f"--prune {text!r}: {value!r} is not a number ({what})") from None
        if not math.isfinite(number):
            raise InputError(f"--prune {text!r}: {value!r} is not a finite number ({what})")
        if threshold:
            return cls(name.strip(), threshold=number, seed=seed)
        if not 0 <= number < 1:
            raise InputError(f"--prune {text!r}: the fraction must be at least 0 and below 1 (got {number})")
        return cls(name.strip(), fraction=number, seed=seed)

    def describe(self) -> dict:
        out = {"estimator": self.estimator}
        out.update({"fraction": self.fraction} if self.fraction is not None else {"threshold": self.threshold})
        return out


def pruned_count(fraction: float, n: int) -> int:
    """How many of ``n`` documents a ``fraction`` prunes: ``floor(fraction * n + 1/2)``."""
    return min(n, int(math.floor(fraction * n + 0.5)))


def select(scores: np.ndarray, docids: list[str], spec: PruneSpec) -> np.ndarray:
    """A boolean mask, True for the documents to prune."""
    scores = np.asarray(scores, dtype=np.float64)
    mask = np.zeros(len(scores), dtype=bool)
    if spec.threshold is not None:
        mask[:] = scores < spec.threshold
        return mask
    n = pruned_count(spec.fraction or 0.0, len(scores))
    if n:
        id_rank = np.empty(len(docids), dtype=np.int64)
        id_rank[np.argsort(np.asarray(docids, dtype=str), kind="stable")] = np.arange(len(docids))
        mask[np.lexsort((id_rank, scores))[:n]] = True  # lowest score first; among equal scores, the smaller id
    return mask


def write_quality(directory: Path, docids: list[str], scores: np.ndarray, pruned: np.ndarray) -> None:
    """The ``quality/`` directory of a pruned index."""
    directory.mkdir(parents=True, exist_ok=True)
    np.save(directory / "scores.npy", np.asarray(scores, dtype=np.float64))
    (directory / "docids.txt").write_text("".join(d + "\n" for d in docids), encoding="utf-8")
    (directory / "pruned.txt").write_text("".join(d + "\n" for d, p in zip(docids, pruned) if p), encoding="utf-8")


def read_pruned(directory: Path) -> list[str]:
    return (Path(directory) / "pruned.txt").read_text(encoding="utf-8").split("\n")[:-1]
