"""LTR: features of hand-built pairs against hand computation, the LightGBM model round trip, and the reranker's
promise (never drop or invent a candidate; hits below depth follow in their old order)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from collections import Counter

from hypothesis import given, settings, strategies as st

from weir.ranker.rerankers.ltr_features import FEATURES, K1, B, bm25_idf
from weir.ranker.rerankers.text_features import TEXT_FEATURES, text_features
from weir.core.types import Hit, InputError, Query, Run


def reference_min_span(positions: dict[str, list[int]]) -> int:
    """The definition: the length (in tokens) of the shortest window holding a position of every term given."""
    events = sorted((p, t) for t, ps in positions.items() for p in ps)
    need, have, best, left = len(positions), Counter(), math.inf, 0
    for pos, term in events:
        have[term] += 1
        while len(have) == need:
            best = min(best, pos - events[left][0] + 1)
            lt = events[left][1]
            have[lt] -= 1
            if not have[lt]:
                del have[lt]
            left += 1
    return int(best) if best != math.inf else 0


def reference_pair_features(q_terms, doc_terms, title_terms, idf, avg_title_len) -> dict[str, float]:
    """The definition of the text features of one pair, in Python over terms (what the compiled kernel must give,
    float for float; it computed them in weir until stop 62)."""
    def bm25_term(tf, idf_, length, avg_length, k1=K1, b=B):
        return 0.0 if tf <= 0 else idf_ * tf / (tf + k1 * (1.0 - b + b * length / max(avg_length, 1e-9)))

    unique = list(dict.fromkeys(q_terms))
    doc_tf, title_tf = Counter(doc_terms), Counter(title_terms)
    matched = [t for t in unique if doc_tf[t]]
    idfs = [idf[t] for t in unique]
    idf_total = sum(idfs)
    out = {
        "query_len": float(len(q_terms)), "doc_len": float(len(doc_terms)), "title_len": float(len(title_terms)),
        "coverage": len(matched) / len(unique) if unique else 0.0,
        "idf_coverage": sum(idf[t] for t in matched) / idf_total if idf_total > 0 else 0.0,
        "matched_tf": sum(doc_tf[t] for t in unique) / len(doc_terms) if doc_terms else 0.0,
        "idf_sum": idf_total, "idf_max": max(idfs, default=0.0), "idf_mean": idf_total / len(unique) if unique else 0.0,
        "matched_idf_max": max((idf[t] for t in matched), default=0.0),
        "title_coverage": sum(1 for t in unique if title_tf[t]) / len(unique) if unique else 0.0,
        "title_bm25": sum(bm25_term(title_tf[t], idf[t], len(title_terms), avg_title_len) for t in q_terms)
        if title_terms else 0.0,
    }
    positions: dict[str, list[int]] = {}
    for i, t in enumerate(doc_terms):
        if t in set(matched):
            positions.setdefault(t, []).append(i)
    out["min_span"] = len(matched) / reference_min_span(positions) if len(matched) >= 2 else 0.0
    bigrams = list(zip(q_terms, q_terms[1:]))
    doc_bigrams = set(zip(doc_terms, doc_terms[1:]))
    out["bigram_match"] = sum(1 for bg in bigrams if bg in doc_bigrams) / len(bigrams) if bigrams else 0.0
    return out


def kernel_pair_features(q_terms, docs, idf, avg_title_len) -> list[dict[str, float]]:
    """The compiled kernel's features of one query's candidates (``docs``: (terms, title terms) each), over token ids
    made here (a query term no document has: a negative id, as weir.ranker.rerankers.text_features.Tokens gives)."""
    vocab: dict[str, int] = {}
    ids = [(np.asarray([vocab.setdefault(t, len(vocab)) for t in d], dtype=np.int32),
            np.asarray([vocab.setdefault(t, len(vocab)) for t in ti], dtype=np.int32)) for d, ti in docs]
    unique = list(dict.fromkeys(q_terms))
    at = {t: j for j, t in enumerate(unique)}
    from weir.ranker.rerankers.ltr_features import _bounds, _joined

    contents, titles = [d for d, _ in ids], [t for _, t in ids]
    out = text_features(_joined(contents), _bounds(contents), _joined(titles), _bounds(titles),
                        np.asarray([vocab.get(t, -2 - j) for j, t in enumerate(unique)], dtype=np.int64),
                        np.asarray([idf[t] for t in unique], dtype=np.float64),
                        np.asarray([at[t] for t in q_terms], dtype=np.int64), avg_title_len, K1, B)
    return [dict(zip(TEXT_FEATURES, row.tolist())) for row in out]


def test_min_span():
    assert reference_min_span({"a": [0, 9], "b": [5]}) == 5  # [5, 9]
    assert reference_min_span({"a": [0], "b": [1], "c": [7]}) == 8
    assert reference_min_span({"a": [3]}) == 1


def test_pair_features_by_hand():
    idf = {"appl": 1.0, "banana": 2.0, "kiwi": 3.0}
    q = ["appl", "banana", "kiwi"]
    doc = ["appl", "pie", "appl", "banana", "split", "banana"]
    title = ["appl", "pie"]
    for f in (reference_pair_features(q, doc, title, idf, avg_title_len=4.0),
              {"query_len": 3.0, **kernel_pair_features(q, [(doc, title)], idf, 4.0)[0]}):
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


WORDS = st.sampled_from(["a", "b", "c", "d", "e", "f", "g"])  # few, so that terms repeat and match


@settings(max_examples=300, deadline=None)
@given(q=st.lists(WORDS, max_size=8),
       docs=st.lists(st.tuples(st.lists(WORDS, max_size=40), st.lists(WORDS, max_size=5)), min_size=1, max_size=6),
       idf=st.lists(st.floats(0.01, 12.0), min_size=7, max_size=7), avg_title=st.floats(0.5, 6.0))
def test_the_compiled_text_features_are_the_definitions_float_for_float(q, docs, idf, avg_title):
    """Generated queries (repeated terms, terms no document has, none at all) and candidates (empty texts and
    titles): every text feature of the kernel equals the Python definition's exactly."""
    idf_of = dict(zip("abcdefg", idf))
    got = kernel_pair_features(q, docs, idf_of, avg_title)
    for (doc, title), row in zip(docs, got):
        want = reference_pair_features(q, doc, title, idf_of, avg_title)
        assert row == {n: float(want[n]) for n in TEXT_FEATURES}


def test_features_of_tiny_index_by_hand(tiny_index):
    from weir.ranker.rerankers.ltr_features import FeatureExtractor

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
        assert X[i, col["dense_cos"]] == pytest.approx(float(stored[fx.dense.rows([doc])[0]] @ qv), abs=1e-5)
    assert np.nanmax(X[:, col["dense_cos_gap"]]) == pytest.approx(0.0)
    # title BM25 of d3 ("Banana bread": banana matches; titles of lengths 2, 0, 2 -> average 4/3)
    assert X[0, col["title_bm25"]] == pytest.approx(idf * 1 / (1 + 0.9 * (1 - 0.4 + 0.4 * 2 / (4 / 3))), rel=1e-5)


def _tiny_model(tmp_path):
    import lightgbm as lgb

    from weir.ranker.rerankers.ltr import LTRModel

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, len(FEATURES))).astype(np.float32)
    y = (X[:, 0] + 0.1 * rng.normal(size=200) > 0.5).astype(int)
    booster = lgb.train({"objective": "lambdarank", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5},
                        lgb.Dataset(X, y, group=[20] * 10), num_boost_round=5)
    model = LTRModel(booster, FEATURES, {"kind": "ltr", "test": True})
    model.save(tmp_path / "m")
    return model, X


def test_features_of_a_batch_larger_than_the_document_cache(tiny_index):
    """A cache that holds one document answers a batch of three (each was dropped before the next was read)."""
    from weir.ranker.rerankers.ltr_features import FeatureExtractor

    run = Run({"q": [Hit("d3", 5.0, 1), Hit("d1", 3.0, 2), Hit("d2", 1.0, 3)]})
    expected, _ = FeatureExtractor(tiny_index).extract([Query("q", "apple banana")], run, depth=3)
    small = FeatureExtractor(tiny_index, cache_size=1)
    for _ in range(2):
        X, _ = small.extract([Query("q", "apple banana")], run, depth=3)
        assert np.array_equal(X, expected, equal_nan=True)


def test_ltr_model_round_trip(tmp_path):
    from weir.ranker.rerankers.ltr import LTRModel

    model, X = _tiny_model(tmp_path)
    loaded = LTRModel.load(tmp_path / "m")
    assert loaded.features == list(FEATURES) and loaded.card["kind"] == "ltr"
    np.testing.assert_array_equal(model.predict(X), loaded.predict(X))


def test_ltr_reranker_keeps_candidates(tiny_index, tmp_path):
    from weir.ranker.rerankers.ltr import LTRReranker

    _tiny_model(tmp_path)
    reranker = LTRReranker(tiny_index, tmp_path / "m", depth=2)
    run = Run({"q": [Hit("d2", 3.0, 1), Hit("d3", 2.0, 2), Hit("d1", 1.0, 3)], "empty": []})
    out = reranker([Query("q", "apple banana"), Query("empty", "nothing")], run, k=10)
    assert sorted(h.doc_id for h in out["q"]) == ["d1", "d2", "d3"]
    assert out["q"][-1].doc_id == "d1"  # below depth: keeps its place after the reranked ones
    assert out["empty"] == []
    assert all(not math.isnan(h.score) for h in out["q"])


def test_boosting_from_a_feature_round_trips(tmp_path):
    """--init-from: the trees start from a feature standardized per query; the saved model adds it back at predict
    time, so scores survive save/load, and with no trees' say the ranking is the feature's."""
    import lightgbm as lgb

    from weir.ranker.rerankers.ltr import LTRModel, base_scores

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


@pytest.mark.parametrize("members, init_from, rounds", [(1, None, None), (3, "attention", None), (1, "attention", 0)])
def test_contributions_add_up_to_each_score(members, init_from, rounds):
    """explain: TreeSHAP contributions (their members' mean) plus the bias, and the boosted-from feature's
    standardized value, are each row's score; the reranker keeps them as reasons in the order of its hits."""
    import lightgbm as lgb

    from weir.ranker.rerankers.ltr import LTRModel

    rng = np.random.default_rng(5)
    X = rng.normal(size=(60, len(FEATURES))).astype(np.float32)
    y = (X[:, 0] + X[:, 3] > 0.3).astype(int)
    boosters = [lgb.train({"objective": "lambdarank", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5,
                           "seed": s, "bagging_fraction": 0.8, "bagging_freq": 1},
                          lgb.Dataset(X, y, group=[20, 20, 20]), num_boost_round=6) for s in range(members)]
    model = LTRModel(boosters, FEATURES, {"kind": "ltr"}, init_from=init_from, rounds=rounds)
    qids = ["a"] * 20 + ["b"] * 20 + ["c"] * 20
    parts = model.contributions(X, qids)
    assert parts.shape == (60, len(FEATURES) + 1)
    np.testing.assert_allclose(parts.sum(axis=1), model.predict(X, qids), rtol=0, atol=1e-9)
    some = np.array([3, 25, 59])  # a few rows' alone: the standardization still reads their queries' every row
    np.testing.assert_allclose(model.contributions(X, qids, some), parts[some], rtol=0, atol=1e-12)
    if rounds == 0:  # the boosted-from feature is the whole score
        assert (parts[:, [i for i, f in enumerate(FEATURES) if f != init_from]] == 0).all()


@pytest.mark.parametrize("missing", ["nan", "zero"])
def test_tree_shap_tables_give_lightgbms_contributions(missing):
    """The tables' TreeSHAP equals LightGBM's pred_contrib (to 1e-12) for rows with missing values taking each
    node's default branch (NaN, or zero as missing), repeated features on a path, single-leaf trees; a model whose
    paths hold more distinct features than the tables take has none (LightGBM's own is used, through the model)."""
    import lightgbm as lgb

    from weir.ranker.rerankers.ltr import LTRModel
    from weir.ranker.rerankers.tree_shap import TreeShap

    rng = np.random.default_rng(11)
    X = rng.normal(size=(400, 6))
    X[rng.random(X.shape) < 0.2] = np.nan if missing == "nan" else 0.0
    y = (np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) * np.nan_to_num(X[:, 2]) > 0.2).astype(int)
    params = {"objective": "lambdarank", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 3, "num_leaves": 7,
              "zero_as_missing": missing == "zero"}
    booster = lgb.train(params, lgb.Dataset(X, y, group=[40] * 10), num_boost_round=25)
    rows = np.vstack([X, np.full((1, 6), np.nan), np.zeros((1, 6))])
    got = TreeShap.of(booster).contributions(rows)
    np.testing.assert_allclose(got, booster.predict(rows, pred_contrib=True), rtol=0, atol=1e-12)
    deep = lgb.train({**params, "num_leaves": 64, "min_data_in_leaf": 1},
                     lgb.Dataset(rng.normal(size=(400, 20)), rng.random(400) > 0.5, group=[40] * 10),
                     num_boost_round=3)
    assert TreeShap.of(deep) is None  # some path splits on more than MAX_PATH_FEATURES distinct features
    model = LTRModel([deep], FEATURES[:20], {"kind": "ltr"})
    Xd = rng.normal(size=(30, 20))
    assert model._tree_shap() == [None]
    np.testing.assert_allclose(model.contributions(Xd), deep.predict(Xd, pred_contrib=True), rtol=0, atol=0)


def test_callers_explaining_at_once_make_the_tables_once_and_get_the_same_parts(monkeypatch):
    """The first explained calls of a server may come together: 8 threads asking a fresh model for contributions at
    once make each member's TreeSHAP tables once and all get the parts one caller alone gets."""
    import threading

    import lightgbm as lgb

    from weir.ranker.rerankers import tree_shap
    from weir.ranker.rerankers.ltr import LTRModel

    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, len(FEATURES)))
    boosters = [lgb.train({"objective": "lambdarank", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5,
                           "num_leaves": 7, "seed": s}, lgb.Dataset(X, X[:, 0] > 0, group=[20] * 3),
                          num_boost_round=8) for s in range(2)]
    alone = LTRModel(boosters, FEATURES, {"kind": "ltr"}).contributions(X)
    made = []
    real = tree_shap.TreeShap.of

    def counted(booster, num_iteration=None):
        made.append(booster)
        return real(booster, num_iteration)

    monkeypatch.setattr(tree_shap.TreeShap, "of", staticmethod(counted))
    model, start, got = LTRModel(boosters, FEATURES, {"kind": "ltr"}), threading.Barrier(8), [None] * 8

    def ask(i):
        start.wait()
        got[i] = model.contributions(X)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 2 and all(np.array_equal(g, alone) for g in got)


def test_top_reasons_name_the_largest_parts_and_add_up():
    from weir.core.hits import DocIds, Ranked

    parts = {f"ltr:f{i}": np.array([float(i - 4), np.nan]) for i in range(8)}
    parts["ltr:(bias)"] = np.array([0.5, np.nan])
    parts["hybrid:bm25"], parts["hybrid:dense"] = np.array([1.0, 2.0]), np.array([0.25, 0.5])
    hits = Ranked(DocIds(["x", "y"]), np.array([0, 1]), np.array([1.0, 0.0]), {}, None, parts)
    first, second = hits.top_reasons(top=3)
    assert [(s, p) for s, p, _ in first] == [("ltr", "f0"), ("ltr", "f1"), ("ltr", "f7"), ("ltr", "(bias)"),
                                             ("ltr", "(other parts)"), ("hybrid", "bm25"), ("hybrid", "dense")]
    assert sum(v for s, _, v in first if s == "ltr") == pytest.approx(sum(range(-4, 4)) + 0.5)
    assert [(s, p) for s, p, _ in second] == [("hybrid", "bm25"), ("hybrid", "dense")]  # not scored by ltr: none
    assert hits.take(slice(1)).top_reasons(top=3)[0] == first


def _members(n: int, seed: int = 5):
    """``n`` boosters of one tiny lambdarank problem that differ only in their seed (rows and features sampled)."""
    import lightgbm as lgb

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(60, len(FEATURES))).astype(np.float32)
    y = (X[:, 0] + X[:, 3] > 0.3).astype(int)
    return [lgb.train({"objective": "lambdarank", "verbose": -1, "num_threads": 1, "min_data_in_leaf": 5, "seed": s,
                       "bagging_fraction": 0.7, "bagging_freq": 1, "feature_fraction": 0.7},
                      lgb.Dataset(X, y, group=[20, 20, 20]), num_boost_round=8) for s in range(n)], X


def test_risk_aware_scores_are_the_mean_minus_risk_times_the_spread(tmp_path):
    """A model of several members scores mean - risk * spread (the members' standard deviation), its own risk by
    default and another when asked; the risk survives save and load; 0 is the plain mean."""
    from weir.ranker.rerankers.ltr import LTRModel

    boosters, X = _members(3)
    each = np.stack([b.predict(X) for b in boosters])
    qids = ["a"] * 20 + ["b"] * 20 + ["c"] * 20
    model = LTRModel(boosters, FEATURES, {"kind": "ltr"}, init_from="bm25", risk=0.75)
    model.save(tmp_path / "m")
    loaded = LTRModel.load(tmp_path / "m")
    assert loaded.risk == 0.75 and json.loads((tmp_path / "m" / "features.json").read_text())["risk"] == 0.75
    base = loaded.predict(X, qids, risk=0.0) - each.mean(axis=0)  # the boosted-from feature's part
    scores, spread = loaded.scored(X, qids)
    assert spread.min() >= 0 and spread.max() > 0.01  # the members do disagree
    np.testing.assert_allclose(spread, each.std(axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(scores, each.mean(axis=0) - 0.75 * each.std(axis=0) + base, rtol=0, atol=1e-12)
    np.testing.assert_allclose(loaded.predict(X, qids, risk=2.0), each.mean(axis=0) - 2 * spread + base, atol=1e-12)
    one = LTRModel(boosters[:1], FEATURES, {"kind": "ltr"})
    np.testing.assert_array_equal(one.scored(X)[1], np.zeros(len(X)))  # one member: no spread


@pytest.mark.parametrize("meta, message", [({"members": 1, "risk": 0.5}, "several members"),
                                           ({"members": 2, "risk": -1}, "at least 0"),
                                           ({"members": 2, "risk": "high"}, "must be a number")])
def test_a_model_of_a_bad_risk_is_refused(tmp_path, meta, message):
    from weir.ranker.rerankers.ltr import LTRModel

    boosters, _ = _members(2)
    LTRModel(boosters, FEATURES, {"kind": "ltr"}).save(tmp_path / "m")
    features = json.loads((tmp_path / "m" / "features.json").read_text())
    (tmp_path / "m" / "features.json").write_text(json.dumps({**features, **meta}))
    if meta["members"] == 1:
        (tmp_path / "m" / "model.1.txt").unlink()
    with pytest.raises(InputError, match=message):
        LTRModel.load(tmp_path / "m")


def test_the_reranker_keeps_the_spread_and_explains_the_risk(tiny_index, tmp_path):
    """Served, a risk-aware model's hits carry stage_scores ltr_spread; their order is mean - risk * spread;
    explained, the reasons (contributions, bias and the risk's penalty) add up to each explained score; ltr_risk
    overrides the model's risk, and a risk over a one-member model is refused."""
    from weir.ranker.rerankers.ltr import LTRModel, LTRReranker

    boosters, _ = _members(4, seed=9)
    LTRModel(boosters, FEATURES, {"kind": "ltr"}, risk=1.5).save(tmp_path / "m")
    run = Run({"q": [Hit("d2", 3.0, 1), Hit("d3", 2.0, 2), Hit("d1", 1.0, 3)]})
    queries = [Query("q", "apple banana")]
    reranker = LTRReranker(tiny_index, tmp_path / "m", depth=3)
    hits = reranker.rerank(queries, run, 3, explain=3).ranking("q")
    spread, score = hits.stages["ltr_spread"], hits.stages["ltr"]
    X, _ = reranker.extractor.extract(queries, run, 3)
    each = np.stack([b.predict(X[:, reranker.cols]) for b in boosters])
    order = [["d2", "d3", "d1"].index(d) for d in hits.doc_ids()]
    np.testing.assert_allclose(spread, each.std(axis=0)[order], atol=1e-12)
    np.testing.assert_allclose(score, (each.mean(axis=0) - 1.5 * each.std(axis=0))[order], atol=1e-12)
    for reasons, s, sp in zip(hits.top_reasons(top=3), score, spread):
        assert ("ltr", "(risk)", pytest.approx(-1.5 * sp)) in reasons
        assert sum(v for _, _, v in reasons) == pytest.approx(s, abs=1e-9)
    mean = LTRReranker(tiny_index, tmp_path / "m", depth=3, risk=0).rerank(queries, run, 3).ranking("q")
    np.testing.assert_allclose(np.sort(mean.stages["ltr"]), np.sort(each.mean(axis=0)), atol=1e-12)
    LTRModel(boosters[:1], FEATURES, {"kind": "ltr"}).save(tmp_path / "one")
    with pytest.raises(InputError, match="one member"):
        LTRReranker(tiny_index, tmp_path / "one", risk=0.5)


def test_the_shipped_seed_ensemble_is_named_and_ranks_by_risk(tiny_index):
    """``ltr_model=ltr-members`` names the shipped model of five seeds: its hits carry their spread, its risk is
    the one its training chose (recorded in features.json), ``ltr_risk`` overrides it, and a score identity names
    the risk, so a calibration of one risk never calibrates another."""
    from weir.core.runtime import shipped_model
    from weir.ranker import registry
    from weir.ranker.options import PipelineOptions

    meta = json.loads((shipped_model("ltr-members") / "features.json").read_text())
    options = PipelineOptions.from_mapping({"ltr_model": "ltr-members"})
    stage = registry.build_stage("ltr", tiny_index, options)
    assert len(stage.model.boosters) == meta["members"] == 5 and stage.risk == meta["risk"] > 0
    run = registry.build("bm25>>ltr", tiny_index, options)([Query("q", "apple banana")], k=3)
    assert all(h.stage_scores["ltr_spread"] > 0 for h in run["q"])
    assert registry.build_stage("ltr", tiny_index, options.updated({"ltr_risk": 0})).risk == 0
    identity = registry.score_identity("bm25>>ltr", tiny_index, options)
    assert identity != registry.score_identity("bm25>>ltr", tiny_index, options.updated({"ltr_risk": 2}))
    assert identity["models"]["ltr"] == registry.score_identity(
        "bm25>>ltr", tiny_index, PipelineOptions.from_mapping({"ltr_model": str(shipped_model("ltr-members"))}))[
        "models"]["ltr"]  # a name and its path are one model
