"""One LightGBM lambdarank fit (:func:`fit`): the default parameters, boosting from an init feature standardized per
query, early stopping or the whole validation curve; LightGBM's own nDCG@10 for rows scored otherwise; the monotone
constraints of the features of known direction."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from weir.ranker.rerankers.ltr import base_scores
from weir.ranker.rerankers.ltr_features import DIRECTION
from weir.core.types import InputError

DEFAULT_PARAMS = {
    "objective": "lambdarank", "metric": "ndcg", "ndcg_eval_at": [10], "learning_rate": 0.05, "num_leaves": 15,
    "min_data_in_leaf": 20, "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1,
    "lambdarank_truncation_level": 20, "verbose": -1, "num_threads": 1,
}


def ndcg_at_10(scores: np.ndarray, labels: np.ndarray, groups: Sequence[int]) -> float:
    """LightGBM's ``ndcg@10`` (gains 2^label - 1, a query without a relevant row counting 1), averaged over the
    queries: what its validation curve reports, for rows scored otherwise (an init feature alone)."""
    values = ndcg_at_10_per_query(scores, labels, groups)
    return float(np.mean(values)) if len(values) else float("nan")


def ndcg_at_10_per_query(scores: np.ndarray, labels: np.ndarray, groups: Sequence[int]) -> np.ndarray:
    """:func:`ndcg_at_10` of each query (rows grouped by ``groups``, in order); ties keep the rows' order."""
    values, start = [], 0
    for n in groups:
        s, y = scores[start:start + n], labels[start:start + n]
        start += n
        discount = 1 / np.log2(np.arange(2, min(10, n) + 2))
        ideal = ((2 ** np.sort(y)[::-1][:10] - 1) * discount).sum()
        got = ((2 ** y[np.argsort(-s, kind="stable")][:10] - 1) * discount).sum()
        values.append(got / ideal if ideal > 0 else 1.0)
    return np.asarray(values, dtype=np.float64)


def monotone_constraints(features: Sequence[str]) -> list[int]:
    """LightGBM's ``monotone_constraints``: each feature's known direction (:data:`DIRECTION`), 0 where none."""
    return [DIRECTION.get(f, 0) for f in features]


def fit(train_parts: Sequence[tuple[np.ndarray, np.ndarray, list[int]]],
        valid_parts: Sequence[tuple[np.ndarray, np.ndarray, list[int]]], features: Sequence[str], *,
        params: dict | None = None, rounds: int = 1000, early_stopping: int | None = 50, seed: int = 13,
        threads: int = 0, init_col: int | None = None, separate_valid: bool = False):
    """Train a lambdarank booster on the concatenated parts, early-stopped on the validation parts' nDCG@10 (with
    ``early_stopping=None``: all ``rounds``, the validation curve returned as ``valid_curve``). With ``init_col``,
    boosting starts from that feature standardized per query (:func:`base_scores`); ``valid_init`` in the returned
    info is then the validation nDCG@10 of that feature alone (round 0). ``separate_valid``: each validation part is
    scored alone (``valid_curves``, ``valid_inits``: one per non-empty part, in order), never early-stopped."""
    import lightgbm as lgb

    train = _stacked(train_parts)
    if train is None:
        raise InputError("no training query has a relevant candidate: check the qrels and the candidates")
    params = {**DEFAULT_PARAMS, **(params or {}), "seed": seed, **({"num_threads": threads} if threads else {})}
    label_max = int(max(train[1].max(), 1))
    params.setdefault("label_gain", [float(2 ** i - 1) for i in range(max(label_max + 1, 32))])
    dtrain = lgb.Dataset(train[0], train[1], group=train[2], feature_name=list(features), free_raw_data=False,
                         init_score=base_scores(train[0], train[2], init_col))
    valid = _stacked(valid_parts)
    callbacks = [lgb.log_evaluation(0)]
    sets, names = [], []
    if separate_valid:
        parts = [p for p in valid_parts if p[2]]
        sets = [lgb.Dataset(p[0], p[1], group=p[2], reference=dtrain, init_score=base_scores(p[0], p[2], init_col))
                for p in parts]
        names = [f"valid{i}" for i in range(len(parts))]
        record: dict = {}
        booster = lgb.train(params, dtrain, num_boost_round=rounds, valid_sets=sets, valid_names=names,
                            callbacks=callbacks + [lgb.record_evaluation(record)])
        info = {"best_iteration": booster.current_iteration(), "train_queries": len(train[2]),
                "valid_queries": sum(len(p[2]) for p in parts),
                "valid_curves": [record[n]["ndcg@10"] for n in names]}
        if init_col is not None:
            info["valid_inits"] = [ndcg_at_10(base_scores(p[0], p[2], init_col), p[1], p[2]) for p in parts]
        return booster, info
    if valid is not None:
        sets, names = [lgb.Dataset(valid[0], valid[1], group=valid[2], reference=dtrain,
                                   init_score=base_scores(valid[0], valid[2], init_col))], ["valid"]
        if early_stopping is not None:
            callbacks.append(lgb.early_stopping(early_stopping, verbose=False))
    record: dict = {}
    callbacks.append(lgb.record_evaluation(record))
    booster = lgb.train(params, dtrain, num_boost_round=rounds, valid_sets=sets, valid_names=names,
                        callbacks=callbacks)
    best = booster.best_iteration or booster.current_iteration()
    score = booster.best_score.get("valid", {}).get("ndcg@10") if valid is not None else None
    info = {"best_iteration": int(best), "valid_ndcg@10": score,
            "train_queries": len(train[2]), "valid_queries": len(valid[2]) if valid else 0}
    if early_stopping is None and valid is not None:
        info["valid_curve"] = record["valid"]["ndcg@10"]
        if init_col is not None:
            info["valid_init"] = ndcg_at_10(base_scores(valid[0], valid[2], init_col), valid[1], valid[2])
    return booster, info


def _stacked(parts: Sequence[tuple[np.ndarray, np.ndarray, list[int]]]):
    """The non-empty parts as one (rows, labels, group sizes), or None when there is none."""
    parts = [p for p in parts if len(p[0])]
    if not parts:
        return None
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            [g for p in parts for g in p[2]])
