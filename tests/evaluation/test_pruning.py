"""The pruning sweep's settings are checked before anything is built: cross-fitting a trainable estimator needs the
trainer it is given (evaluation never imports training)."""

from __future__ import annotations

import pytest

from weir.core.types import InputError
from weir.evaluation.pruning import SweepConfig, sweep


def test_cross_fitting_a_trainable_estimator_needs_a_trainer(tmp_path):
    config = SweepConfig(collection=str(tmp_path), topics=str(tmp_path / "t.tsv"), qrels=str(tmp_path / "q.txt"),
                         out=str(tmp_path / "out"), estimators=["length", "surface"], components=["bm25"],
                         pipelines=["bm25"], cross_fit=2)
    with pytest.raises(InputError, match="train_estimator"):
        sweep(config, log=lambda _: None)
    assert not (tmp_path / "out").exists()
