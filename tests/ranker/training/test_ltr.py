"""LTR training: earlier stages' scores from run files become features; the number of rounds is chosen by inner
cross-validation."""

from __future__ import annotations

import numpy as np
import pytest

from ranker.rerankers.ltr_features import FEATURES
from weir.types import Hit, Query, Run


def test_stage_run_scores_become_features(tiny_index, tmp_path):
    """An earlier stage's scores from a run file (e.g. a cross-validated attention run) fill the ``attention``
    features; a candidate missing from that run gets NaN."""
    from ranker.rerankers.ltr_features import FeatureExtractor
    from ranker.training.ltr import attach_stage_scores

    Run({"q": [Hit("d1", 2.5, 1), Hit("d3", -1.5, 2)]}).write_trec(tmp_path / "attention.trec")
    run = Run({"q": [Hit("d3", 5.0, 1), Hit("d1", 3.0, 2), Hit("d2", 1.0, 3)]})
    attach_stage_scores(run, f"attention:{tmp_path / 'attention.trec'}")
    X, _ = FeatureExtractor(tiny_index).extract([Query("q", "apple banana")], run, depth=3)
    col = {n: i for i, n in enumerate(FEATURES)}
    np.testing.assert_allclose(X[:2, col["attention"]], [-1.5, 2.5])
    np.testing.assert_allclose(X[:2, col["attention_norm"]], [0.0, 1.0])
    assert np.isnan(X[2, col["attention"]]) and np.isnan(X[2, col["attention_norm"]])
    with pytest.raises(Exception, match="NAME:RUN"):
        attach_stage_scores(run, "nonsense")


def test_rounds_chosen_by_inner_cross_validation():
    """--rounds-by cv: the number of rounds maximizes the mean inner-fold validation nDCG@10 curve, and the final
    model is trained on every training query with that many rounds."""
    import lightgbm as lgb

    from ranker.training.common import folds_of
    from ranker.training.ltr import DEFAULT_PARAMS, Examples, TrainConfig, _fit_on, rounds_by_cv

    rng = np.random.default_rng(3)
    n_q, per = 24, 20
    X = rng.normal(size=(n_q * per, len(FEATURES))).astype(np.float32)
    y = np.clip(np.round(X[:, 0] + 0.8 * rng.normal(size=len(X))), 0, 3).astype(np.float32)
    qids = [f"q{i // per}" for i in range(len(X))]
    ex = Examples([Query(f"q{i}", "") for i in range(n_q)], Run(), X, y, qids)
    config = TrainConfig(sets=[], out="", rounds=40, inner_folds=3, seed=5)
    keep = set(qids)
    rounds, best = rounds_by_cv([ex], keep, config, FEATURES)
    curves = []
    for inner in folds_of(sorted(keep), 3, 6):
        tr, va = ex.select(keep - inner), ex.select(inner)
        params = {**DEFAULT_PARAMS, "seed": 5, "label_gain": [float(2 ** i - 1) for i in range(32)]}
        dtrain = lgb.Dataset(tr[0], tr[1], group=tr[2], feature_name=list(FEATURES))
        record: dict = {}
        lgb.train(params, dtrain, 40, valid_sets=[lgb.Dataset(va[0], va[1], group=va[2], reference=dtrain)],
                  valid_names=["valid"], callbacks=[lgb.record_evaluation(record)])
        curves.append(record["valid"]["ndcg@10"])
    mean = np.mean(curves, axis=0)
    assert rounds == int(np.argmax(mean)) + 1 and best == pytest.approx(mean.max())
    booster, info = _fit_on([ex], keep, config, FEATURES)
    assert booster.current_iteration() == rounds and info["best_iteration"] == rounds
