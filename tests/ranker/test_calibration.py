"""Calibrated relevance: features that do not depend on k, probabilities that never rise down a ranking, a cutoff
that keeps a prefix, a fit that recovers known probabilities, and tuning files checked when read."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from weir.core.hits import DocIds, Ranked
from weir.core.types import InputError, Query, Run
from weir.evaluation.calibration import expected_calibration_error, reliability, set_measures
from weir.ranker.calibration import (FEATURES, VERSION, WINDOW, Calibration, calibration_for, calibration_path, cut,
                                     hit_features)
from weir.training.calibration import fit


def _calibration(coef=(1.0, 0, 2.0, -0.5, 0, 0, 0), intercept=-1.0) -> Calibration:
    n = len(FEATURES)
    return Calibration("bm25", np.zeros(n), np.ones(n), np.asarray(coef, dtype=float), intercept)


def test_a_hits_features_and_relevance_do_not_depend_on_how_many_hits_were_asked_for():
    scores = np.sort(np.random.default_rng(0).gamma(2.0, 3.0, 1000))[::-1]
    deep, shallow = hit_features(scores, "stem cells in mice"), hit_features(scores[:WINDOW], "stem cells in mice")
    assert np.array_equal(deep[:WINDOW], shallow)
    c = _calibration()
    assert np.array_equal(c.relevance(scores, "q")[:WINDOW], c.relevance(scores[:WINDOW], "q"))


def test_relevance_never_rises_down_a_ranking_and_a_cutoff_keeps_a_prefix():
    c = _calibration(coef=(0, 0, 0, 3.0, 0, 0, 0))  # a model that would rise with rank
    scores = np.linspace(10, 1, 30)
    p = c.relevance(scores, "q")
    assert (np.diff(p) <= 0).all() and p[0] == c.probabilities(hit_features(scores, "q"))[0]
    hits = Ranked(DocIds([f"d{i}" for i in range(30)]), np.arange(30), scores, {}, p)
    for m in (0.0, float(p[7]), 1.0):
        kept = cut(hits, m)
        assert kept.doc_ids() == hits.doc_ids()[:len(kept)] and (kept.relevance >= m).all()
        assert len(kept) == int((p >= m).sum())
    assert len(cut(hits, 0.0)) == 30 and cut(hits, None) is hits
    with pytest.raises(InputError, match="calibrated"):
        cut(Ranked(hits.ids, hits.docs, hits.scores), 0.5)


def _synthetic(rng, queries: int):
    """Queries whose hits are relevant with a known probability of their z-score in the top 10 and their rank."""
    runs, truth, qrels, topics = Run(), [], {}, []
    for i in range(queries):
        scores = np.sort(rng.normal(rng.uniform(5, 20), rng.uniform(0.5, 3), 20))[::-1]
        z = hit_features(scores, "a query")[:, FEATURES.index("zscore")]
        p = 1 / (1 + np.exp(-(1.5 * z - 1.8)))
        relevant = rng.random(20) < p
        qid = f"q{i}"
        ids = [f"{qid}-d{j}" for j in range(20)]
        runs[qid] = Ranked(DocIds(ids), np.arange(20), scores)
        qrels[qid] = {d: 1 for d, r in zip(ids, relevant) if r}
        topics.append(Query(qid, "a query"))
        truth.append(p)
    return runs, qrels, topics, np.concatenate(truth)


def test_a_fit_on_training_queries_recovers_the_probabilities_on_queries_it_never_saw():
    from weir.training.calibration import examples

    rng = np.random.default_rng(7)
    train, train_qrels, train_topics, _ = _synthetic(rng, 400)
    X, y, _ = examples(train, train_topics, train_qrels)
    calibration = fit(X, y, "bm25")
    test, test_qrels, test_topics, truth = _synthetic(rng, 400)
    X, y, _ = examples(test, test_topics, test_qrels)
    p = calibration.probabilities(X)
    assert np.abs(p - truth).mean() < 0.03
    assert expected_calibration_error(p, y) < 0.03
    # a wrong probability is caught: the same hits scored by a model shifted by one logit
    wrong = Calibration("bm25", calibration.mean, calibration.scale, calibration.coef, calibration.intercept + 1.0)
    assert expected_calibration_error(wrong.probabilities(X), y) > 0.05  # the acceptance line
    with pytest.raises(InputError, match="both"):
        fit(X, np.zeros(len(y), dtype=bool), "bm25")


def test_reliability_bins_and_ece_by_hand():
    p = np.array([0.05, 0.05, 0.95, 0.95, 0.55])
    y = np.array([False, False, True, False, True])
    bins = reliability(p, y)
    assert [b["hits"] for b in bins] == [2, 0, 0, 0, 0, 1, 0, 0, 0, 2]
    assert expected_calibration_error(p, y) == pytest.approx((2 * 0.05 + 1 * 0.45 + 2 * 0.45) / 5)


def test_set_measures_count_an_empty_answer_right_only_where_nothing_is_relevant():
    qrels = {"a": {"d1": 1, "d2": 0}, "b": {"d9": 0}, "c": {"d3": 2}}
    m = set_measures({"a": ["d1", "d5"], "b": [], "c": []}, qrels, min_rel=1)
    assert m["a"] == {"precision": 0.5, "recall": 1.0, "kept": 2}
    assert m["b"]["precision"] == 1.0 and m["b"]["recall"] != m["b"]["recall"]  # nothing to find: NaN recall
    assert m["c"]["precision"] == 0.0 and m["c"]["recall"] == 0.0
    # nothing relevant among the hits chosen from: an empty answer is right
    assert set_measures({"c": []}, qrels, candidates={"c": ["d1", "d9"]})["c"]["precision"] == 1.0


class _Index:
    def __init__(self, path):
        self.path = path


def _write(index, pipeline: str, entry: dict) -> None:
    path = calibration_path(index)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"pipelines": {pipeline: entry}}))


def test_a_tuning_file_is_checked_when_read(tmp_path, caplog):
    index = _Index(tmp_path)
    identity = {"pipeline": "bm25", "options": {"bm25": {"k1": 0.9, "b": 0.4}}}
    entry = {**_calibration().entry(), "identity": identity}
    assert calibration_for(index, "bm25", lambda: identity) is None  # no file: uncalibrated
    _write(index, "bm25", entry)
    assert calibration_for(index, "bm25", lambda: identity).intercept == -1.0
    assert calibration_for(index, "dense", lambda: identity) is None
    with caplog.at_level(logging.WARNING):
        other = {**identity, "options": {"bm25": {"k1": 1.2, "b": 0.4}}}
        assert calibration_for(index, "bm25", lambda: other) is None
    assert "options changed" in caplog.text and "uncalibrated" in caplog.text
    for broken, message in [({"version": VERSION + 1}, "version"), ({"features": ["score"]}, "features"),
                            ({"coef": [1.0]}, "malformed"), ({"scale": [0.0] * len(FEATURES)}, "malformed"),
                            ({"intercept": "x"}, "malformed")]:
        _write(index, "bm25", {**entry, **broken})
        with pytest.raises(InputError, match=message):
            calibration_for(index, "bm25", lambda: identity)
    calibration_path(index).write_text("{not json")
    with pytest.raises(InputError, match="malformed calibration file"):
        calibration_for(index, "bm25", lambda: identity)
