"""The fusion grid search evaluates the same fusions as the hybrid retriever computes."""

from __future__ import annotations

import pytest

from weir.ranker.retrievers.hybrid import fuse_runs
from weir.core.types import Hit, Run


def test_tuning_grid_fuses_as_fuse_runs():
    """The vectorized fusion of the tuning grid ranks exactly as the retriever's fusion (ties by docid)."""
    import random

    from weir.training.fusion import FusionGrid

    rng = random.Random(7)
    runs = []
    for name in ("bm25", "dense"):
        run = Run()
        for q in ("q1", "q2", "q3"):
            docs = rng.sample([f"d{i}" for i in range(40)], 25)
            run[q] = [Hit(d, round(rng.uniform(0, 5), 1), 0, {name: 0.0}) for d in docs]
        runs.append(run.ranked())
    grid = FusionGrid(runs, ["q1", "q2", "q3"])
    for method, weights, k in (("rrf", [1.0, 1.0], 60), ("rrf", [0.3, 0.7], 10), ("minmax", [0.4, 0.6], 60),
                               ("zscore", [0.5, 0.5], 60), ("zscore", [1.0, 0.0], 60)):
        reference = fuse_runs(runs, method=method, weights=weights, k=k, depth=10)
        fast = grid.fuse(method, weights, k, depth=10)
        for q in ("q1", "q2", "q3"):
            assert list(fast[q]) == [h.doc_id for h in reference[q]], (method, weights, q)
            assert list(fast[q].values()) == pytest.approx([h.score for h in reference[q]])
