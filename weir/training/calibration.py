"""`weir tune calibration`: each pipeline's mapping from scores to P(relevant), fitted on training judgments.

For each pipeline, :func:`tune_calibration` runs it (uncalibrated) over the training topics to ``depth`` hits, takes
every hit's :data:`weir.ranker.calibration.FEATURES` and whether the qrels judge it relevant (grade >= ``min_rel``;
unjudged = not relevant, as every measure here counts it), and fits a logistic regression (scikit-learn, L2, on
standardized features; no class weights, so that the probabilities keep the base rate). The result goes into
``<index>/tuning/calibration.json``, one entry per pipeline beside those already there, with what it was fitted on
(topics, qrels and their sha256, the pipeline's score identity) and how it fits its own training hits (ECE on the top
10, log loss); :mod:`weir.ranker.calibration` applies it. Test topics are refused (the fusion tuner's guard).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from weir.core.provenance import sha256_file, utc_now, write_json
from weir.core.trec import read_qrels, read_topics
from weir.core.types import InputError, Query, Run
from weir.evaluation.calibration import expected_calibration_error
from weir.ranker.calibration import WINDOW, Calibration, calibration_path, hit_features, read_file
from weir.ranker.options import PipelineOptions
from weir.training.common import check_training_topics

DEPTH = 20  # hits a query fitted on: the top 10 judged, and the ranks a cutoff below them reaches
C = 1.0  # inverse L2 strength (scikit-learn's default)


def examples(run: Run, queries: Sequence[Query], qrels: Mapping[str, Mapping[str, int]], *, depth: int = DEPTH,
             min_rel: int = 1, window: int = WINDOW) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features, relevant, rank) of the top ``depth`` hits of each judged query of ``queries`` in ``run``."""
    X, y, ranks = [], [], []
    for q in queries:
        if q.id not in qrels or q.id not in run:
            continue
        hits = run.ranking(q.id)
        features = hit_features(hits.scores, q.text, window)[:depth]
        judged = qrels[q.id]
        X.append(features)
        y.append(np.array([judged.get(d, 0) >= min_rel for d in hits.take(slice(depth)).doc_ids()], dtype=bool))
        ranks.append(np.arange(1, len(features) + 1))
    if not X:
        raise InputError("no judged query has hits: wrong qrels for these topics?")
    return np.concatenate(X), np.concatenate(y), np.concatenate(ranks)


def fit(X: np.ndarray, y: np.ndarray, pipeline: str, *, c: float = C, window: int = WINDOW) -> Calibration:
    """A logistic regression of ``y`` on standardized ``X``."""
    from sklearn.linear_model import LogisticRegression

    if y.all() or not y.any():
        raise InputError(f"{pipeline}: the training hits are all {'relevant' if y.all() else 'not relevant'}; "
                         "a calibration needs both")
    mean, scale = X.mean(axis=0), X.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    model = LogisticRegression(C=c, max_iter=2000).fit((X - mean) / scale, y)
    return Calibration(pipeline, mean, scale, model.coef_[0].astype(np.float64), float(model.intercept_[0]), window)


def fit_stats(calibration: Calibration, X: np.ndarray, y: np.ndarray, ranks: np.ndarray) -> dict:
    """How a calibration fits the hits it was fitted on: ECE and share relevant on the top 10, log loss."""
    p = np.clip(calibration.probabilities(X), 1e-12, 1 - 1e-12)
    top = ranks <= 10
    return {"hits": int(len(y)), "relevant": int(y.sum()),
            "ece_top10": round(expected_calibration_error(p[top], y[top]), 5),
            "relevant_share_top10": round(float(y[top].mean()), 5),
            "log_loss": round(float(-np.mean(y * np.log(p) + (~y) * np.log(1 - p))), 5)}


def tune_calibration(index, pipelines: Sequence[str], topics_path: str, qrels_path: str, *,
                     options: PipelineOptions | None = None, depth: int = DEPTH, min_rel: int = 1, c: float = C,
                     remove_identical: bool = False, allow_test_topics: bool = False, write: bool = True,
                     runs: Mapping[str, Run] | None = None) -> dict:
    """Fit a calibration of each of ``pipelines`` over ``index`` on the training topics; add them to the index's
    calibration file (unless not ``write``); return the file's contents. ``runs``: a pipeline's uncalibrated run of
    the topics (at least ``depth`` and :data:`WINDOW` hits a query) where one was made already."""
    from weir.ranker import registry

    check_training_topics(index, topics_path, allow_test_topics)
    if depth < 1:
        raise InputError(f"the depth fitted on must be at least 1 (got {depth})")
    topics, qrels = read_topics(topics_path), read_qrels(qrels_path)
    judged = [q for q in topics if q.id in qrels and (runs is None or any(q.id in r for r in runs.values()))]
    if not judged:
        raise InputError(f"no topic of {topics_path} is judged in {qrels_path}: wrong qrels?")
    tuned_on = {"topics": str(Path(topics_path).resolve()), "topics_sha256": sha256_file(topics_path),
                "qrels": str(Path(qrels_path).resolve()),
                "qrels_sha256": sha256_file(qrels_path), "queries": len(judged)}
    data = read_file(index) or {"pipelines": {}}
    for spec in pipelines:
        spec = ">>".join(registry.parse(spec))
        run = (runs or {}).get(spec)
        if run is None:
            pipeline = registry.build(spec, index, options)
            pipeline.calibration = None  # fitted on the raw scores
            run = pipeline.search(judged, max(depth, WINDOW), remove_identical=remove_identical)
        X, y, ranks = examples(run, judged, qrels, depth=depth, min_rel=min_rel)
        calibration = fit(X, y, spec, c=c)
        record = {"identity": registry.score_identity(spec, index, options), "tuned_on": tuned_on, "depth": depth,
                  "min_rel": min_rel, "c": c, "remove_identical": remove_identical,
                  "fit": fit_stats(calibration, X, y, ranks), "created": utc_now()}
        data["pipelines"][spec] = dataclasses.replace(calibration, record=record).entry()
    if write:
        path = calibration_path(index)
        path.parent.mkdir(exist_ok=True)
        write_json(path, data, indent=1)
    return data
