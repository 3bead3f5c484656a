"""LTR: features of hand-built pairs against hand computation, the LightGBM model round trip, and the reranker's
promise (never drop or invent a candidate; hits below depth follow in their old order)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ranker.features import FEATURES, bm25_idf, min_span, pair_features
from ranker.rerankers import apply_scores
from weir.types import Hit, Query, Run

DOCS = [
    {"id": "d1", "title": "Apple pie", "text": "apple banana split with banana"},
    {"id": "d2", "title": "", "text": "cherry orange"},
    {"id": "d3", "title": "Banana bread", "text": "bread recipe apple"},
]


def test_min_span():
    assert min_span({"a": [0, 9], "b": [5]}) == 5  # [5, 9]
    assert min_span({"a": [0], "b": [1], "c": [7]}) == 8
    assert min_span({"a": [3]}) == 1


def test_pair_features_by_hand():
    idf = {"appl": 1.0, "banana": 2.0, "kiwi": 3.0}
    q = ["appl", "banana", "kiwi"]
    doc = ["appl", "pie", "appl", "banana", "split", "banana"]
    title = ["appl", "pie"]
    f = pair_features(q, doc, title, idf, avg_title_len=4.0)
    assert f["query_len"] == 3 and f["doc_len"] == 6 and f["title_len"] == 2
    assert f["coverage"] == pytest.approx(2 / 3)
    assert f["idf_coverage"] == pytest.approx(3 / 6)
    assert f["matched_tf"] == pytest.approx(4 / 6)
    assert (f["idf_sum"], f["idf_max"], f["idf_mean"], f["matched_idf_max"]) == (6.0, 3.0, 2.0, 2.0)
    assert f["title_coverage"] == pytest.approx(1 / 3)
    # title BM25 (k1=0.9, b=0.4): only "appl" (tf 1) matches; length 2, average 4
    assert f["title_bm25"] == pytest.approx(1.0 * 1 / (1 + 0.9 * (1 - 0.4 + 0.4 * 2 / 4)))
    # shortest window holding appl and banana: positions 2..3 -> 2 tokens; 2 matched terms / 2
    assert f["min_span"] == pytest.approx(1.0)
    # query bigrams (appl, banana) present, (banana, kiwi) not
    assert f["bigram_match"] == pytest.approx(0.5)


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    from indexer.build import build_index
    from ranker.index import Index

    root = tmp_path_factory.mktemp("tiny")
    (root / "coll").mkdir()
    with open(root / "coll" / "corpus.jsonl", "w") as f:
        for d in DOCS:
            f.write(json.dumps(d) + "\n")
    build_index(root / "coll", root / "index", components=("bm25", "dense"))
    return Index(root / "index")


def test_features_of_tiny_index_by_hand(tiny_index):
    from ranker.features import FeatureExtractor

    fx = FeatureExtractor(tiny_index)
    assert fx.lucene.analyze("Apple pie apple banana split with banana") == ["appl", "pie", "appl", "banana", "split", "banana"]
    run = Run({"q": [Hit("d3", 5.0, 1), Hit("d1", 3.0, 2), Hit("d2", 1.0, 3)]})
    X, rows = fx.extract([Query("q", "apple banana")], run, depth=3)
    assert rows == [("q", 0), ("q", 1), ("q", 2)]
    col = {n: i for i, n in enumerate(FEATURES)}
    lengths = {"d1": 6, "d2": 2, "d3": 5}  # analyzed contents: title + text
    avgdl = sum(lengths.values()) / 3
    idf = bm25_idf(3, 2)  # appl and banana each in two of three documents

    def bm25(tf, dl):
        return idf * tf / (tf + 0.9 * (1 - 0.4 + 0.4 * dl / avgdl))

    expected = {"d3": bm25(1, 5) + bm25(1, 5), "d1": bm25(2, 6) + bm25(2, 6), "d2": 0.0}
    for i, doc in enumerate(["d3", "d1", "d2"]):
        assert X[i, col["bm25"]] == pytest.approx(expected[doc], rel=1e-5)
        assert X[i, col["first_rank"]] == i + 1
    assert X[:, col["bm25_norm"]].max() == pytest.approx(1.0)
    np.testing.assert_allclose(X[:, col["first_score_norm"]], [1.0, 0.5, 0.0])
    assert np.isnan(X[:, col["deepimpact"]]).all() and np.isnan(X[:, col["attention_norm"]]).all()
    # dense cosine: the stored float16 passage vectors against the query embedding
    qv = fx.encoder.encode_queries(["apple banana"])[0]
    stored = np.asarray(fx.dense.vectors, dtype=np.float32)
    for i, doc in enumerate(["d3", "d1", "d2"]):
        assert X[i, col["dense_cos"]] == pytest.approx(float(stored[fx.dense.row_of[doc]] @ qv), abs=1e-5)
    assert np.nanmax(X[:, col["dense_cos_gap"]]) == pytest.approx(0.0)
    # title BM25 of d3 ("Banana bread": banana matches; titles of lengths 2, 0, 2 -> average 4/3)
    assert X[0, col["title_bm25"]] == pytest.approx(idf * 1 / (1 + 0.9 * (1 - 0.4 + 0.4 * 2 / (4 / 3))), rel=1e-5)


def _tiny_model(tmp_path):
    import lightgbm as lgb

    from ranker.rerankers.ltr import LTRModel

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, len(FEATURES))).astype(np.float32)
    y = (X[:, 0] + 0.1 * rng.normal(size=200) > 0.5).astype(int)
    booster = lgb.train({"objective": "lambdarank", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5},
                        lgb.Dataset(X, y, group=[20] * 10), num_boost_round=5)
    model = LTRModel(booster, FEATURES, {"kind": "ltr", "test": True})
    model.save(tmp_path / "m")
    return model, X


def test_ltr_model_round_trip(tmp_path):
    from ranker.rerankers.ltr import LTRModel

    model, X = _tiny_model(tmp_path)
    loaded = LTRModel.load(tmp_path / "m")
    assert loaded.features == list(FEATURES) and loaded.card["kind"] == "ltr"
    np.testing.assert_array_equal(model.predict(X), loaded.predict(X))


def test_apply_scores_never_drops_or_invents():
    hits = [Hit(f"d{i}", 10.0 - i, i + 1) for i in range(6)]
    run = Run({"q": hits, "other": [Hit("x", 1.0, 1)]})
    out = apply_scores([Query("q", "t")], run, 3, {"q": [0.1, 0.9, 0.5]}, "r")
    assert [h.doc_id for h in out["q"]] == ["d1", "d2", "d0", "d3", "d4", "d5"]
    assert [h.rank for h in out["q"]] == [1, 2, 3, 4, 5, 6]
    assert all(a.score > b.score for a, b in zip(out["q"], out["q"][1:]))
    assert out["q"][0].stage_scores["r"] == pytest.approx(0.9)
    assert [h.doc_id for h in out["other"]] == ["x"]
    assert hits[0].score == 10.0  # the input run is not changed


def test_ltr_reranker_keeps_candidates(tiny_index, tmp_path):
    from ranker.rerankers.ltr import LTRReranker

    _tiny_model(tmp_path)
    reranker = LTRReranker(tiny_index, tmp_path / "m", depth=2)
    run = Run({"q": [Hit("d2", 3.0, 1), Hit("d3", 2.0, 2), Hit("d1", 1.0, 3)], "empty": []})
    out = reranker([Query("q", "apple banana"), Query("empty", "nothing")], run, k=10)
    assert sorted(h.doc_id for h in out["q"]) == ["d1", "d2", "d3"]
    assert out["q"][-1].doc_id == "d1"  # below depth: keeps its place after the reranked ones
    assert out["empty"] == []
    assert all(not math.isnan(h.score) for h in out["q"])


def test_stage_run_scores_become_features(tiny_index, tmp_path):
    """An earlier stage's scores from a run file (e.g. a cross-validated attention run) fill the ``attention``
    features; a candidate missing from that run gets NaN."""
    from ranker.features import FeatureExtractor
    from ranker.train_ltr import attach_stage_scores

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

    from ranker.train_ltr import (
        DEFAULT_PARAMS,
        Examples,
        TrainConfig,
        _fit_on,
        folds_of,
        rounds_by_cv,
    )

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


def test_boosting_from_a_feature_round_trips(tmp_path):
    """--init-from: the trees start from a feature standardized per query; the saved model adds it back at predict
    time, so scores survive save/load, and with no trees' say the ranking is the feature's."""
    import lightgbm as lgb

    from ranker.rerankers.ltr import LTRModel
    from ranker.train_ltr import base_scores

    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, len(FEATURES))).astype(np.float32)
    col = FEATURES.index("attention")
    y = (X[:, col] > 0.3).astype(int)
    groups = [20, 20, 20]
    base = base_scores(X, groups, col)
    first = X[:20, col]
    np.testing.assert_allclose(base[:20], (first - first.mean()) / first.std(), rtol=1e-5)
    booster = lgb.train({"objective": "lambdarank", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5},
                        lgb.Dataset(X, y, group=groups, init_score=base), num_boost_round=3)
    model = LTRModel(booster, FEATURES, {"kind": "ltr"}, init_from="attention")
    model.save(tmp_path / "m")
    loaded = LTRModel.load(tmp_path / "m")
    qids = ["a"] * 20 + ["b"] * 20 + ["c"] * 20
    assert loaded.init_from == "attention"
    np.testing.assert_allclose(loaded.predict(X, qids), booster.predict(X) + base, rtol=1e-6)
    np.testing.assert_allclose(loaded.predict(X, qids), model.predict(X, qids))
    with pytest.raises(ValueError, match="query ids"):
        loaded.predict(X)
