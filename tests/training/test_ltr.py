"""LTR training: earlier stages' scores from run files become features; the number of rounds is chosen by inner
cross-validation over every set (the best rounds, or the fewest within one standard error)."""

from __future__ import annotations

import numpy as np
import pytest

from weir.ranker.rerankers.ltr_features import FEATURES
from weir.core.types import Hit, Query, Run


def test_stage_run_scores_become_features(tiny_index, tmp_path):
    """An earlier stage's scores from a run file (e.g. a cross-validated attention run) fill the ``attention``
    features; a candidate missing from that run gets NaN."""
    from weir.ranker.rerankers.ltr_features import FeatureExtractor
    from weir.training.ltr.examples import attach_stage_scores

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


def _examples(seed: int, n_q: int, per: int = 20, prefix: str = "q"):
    from weir.training.ltr.examples import Examples

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_q * per, len(FEATURES))).astype(np.float32)
    y = np.clip(np.round(X[:, 0] + 0.8 * rng.normal(size=len(X))), 0, 3).astype(np.float32)
    qids = [f"{prefix}{i // per}" for i in range(len(X))]
    return Examples([Query(f"{prefix}{i}", "") for i in range(n_q)], Run(), X, y, qids)


def _curve(train_parts, valid_parts, seed: int, rounds: int) -> np.ndarray:
    """The mean over ``valid_parts`` of the validation nDCG@10 curve of a booster fitted on ``train_parts``, computed
    here with LightGBM directly."""
    import lightgbm as lgb

    from weir.training.ltr.boosting import DEFAULT_PARAMS

    dtrain = lgb.Dataset(np.concatenate([p[0] for p in train_parts]), np.concatenate([p[1] for p in train_parts]),
                         group=[g for p in train_parts for g in p[2]], feature_name=list(FEATURES))
    params = {**DEFAULT_PARAMS, "seed": seed, "label_gain": [float(2 ** i - 1) for i in range(32)]}
    record: dict = {}
    lgb.train(params, dtrain, rounds, valid_sets=[lgb.Dataset(v[0], v[1], group=v[2], reference=dtrain)
                                                  for v in valid_parts],
              valid_names=[f"v{j}" for j in range(len(valid_parts))], callbacks=[lgb.record_evaluation(record)])
    return np.mean([record[f"v{j}"]["ndcg@10"] for j in range(len(valid_parts))], axis=0)


def _inner_table(sets, folds: int, seed: int, rounds: int) -> np.ndarray:
    """The inner-fold x round table of mean nDCG@10 over the sets (inner folds of every set's queries)."""
    from weir.evaluation.folds import folds_of

    split = [folds_of(sorted(set(ex.qids)), folds, seed + 1 + j) for j, ex in enumerate(sets)]
    return np.array([_curve([ex.select(set(ex.qids) - split[j][k]) for j, ex in enumerate(sets)],
                            [ex.select(split[j][k]) for j, ex in enumerate(sets)], seed, rounds)
                     for k in range(folds)])


@pytest.mark.parametrize("rule", ["best", "1se", "1se-paired"])
def test_rounds_chosen_by_inner_cross_validation(rule):
    """--rounds-by cv: every set is split into inner folds, each fold scored on every set (the sets counting equally);
    ``best`` takes the rounds of the best mean curve, ``1se`` the fewest rounds within one standard error (over the
    folds) of it, ``1se-paired`` the fewest whose fold-by-fold shortfall is within its own standard error; the final model is trained on every training query with that many rounds."""
    from weir.training.ltr import TrainConfig
    from weir.training.ltr.rounds import rounds_by_cv
    from weir.training.ltr.trainer import fit_on

    sets = [_examples(3, 24), _examples(4, 9, prefix="small")]
    config = TrainConfig(sets=[], out="", rounds=40, inner_folds=3, seed=5, rounds_rule=rule)
    keep = set(sets[0].qids)
    rounds, value, detail = rounds_by_cv(sets, keep, config, FEATURES)
    table = _inner_table(sets, 3, 5, 40)
    mean = table.mean(axis=0)
    best = int(np.argmax(mean))
    se = table[:, best].std(ddof=1) / np.sqrt(3)
    shortfall = table[:, [best]] - table
    paired_se = shortfall.std(axis=0, ddof=1) / np.sqrt(3)
    expected = {"best": best, "1se": int(np.flatnonzero(mean >= mean[best] - se)[0]),
                "1se-paired": int(np.flatnonzero(shortfall.mean(axis=0) <= paired_se)[0])}[rule]
    assert rounds == expected + 1 and value == pytest.approx(mean[expected])
    reported = paired_se[expected] if rule == "1se-paired" else se
    assert detail["best_rounds"] == best + 1 and detail["standard_error"] == pytest.approx(reported, abs=1e-4)
    (booster,), info = fit_on(sets, keep, config, FEATURES)
    assert booster.current_iteration() == rounds and info["best_iteration"] == rounds


def test_rounds_chosen_by_leaving_one_training_set_out():
    """--inner-by sets: each inner fold is one whole training set, scored by a model of the other sets (every query of
    theirs, the first set's ``keep`` only); the rounds are those whose mean over the held-out sets is best. Fewer
    than 3 sets are refused with the reason."""
    from weir.training.ltr import TrainConfig
    from weir.training.ltr.rounds import rounds_by_cv
    from weir.training.ltr.trainer import fit_on

    sets = [_examples(3, 24), _examples(4, 9, prefix="small"), _examples(5, 15, prefix="mid")]
    keep = set(sets[0].qids) - {"q0", "q1"}
    config = TrainConfig(sets=[], out="", rounds=30, seed=5, rounds_rule="best", inner_by="sets")
    rounds, value, detail = rounds_by_cv(sets, keep, config, FEATURES)
    pools = [keep, set(sets[1].qids), set(sets[2].qids)]
    rows = [_curve([ex.select(pools[j]) for j, ex in enumerate(sets) if j != k], [sets[k].select(pools[k])], 5, 30)
            for k in range(3)]
    mean = np.mean(rows, axis=0)
    assert rounds == int(np.argmax(mean)) + 1 and value == pytest.approx(mean.max())
    assert detail["inner_by"] == "sets" and detail["folds_scored"] == 3
    (booster,), info = fit_on(sets, keep, config, FEATURES)
    assert booster.current_iteration() == rounds and info["inner_by"] == "sets" and info["inner_folds"] == 3
    with pytest.raises(Exception, match="at least 3 sets"):
        rounds_by_cv(sets[:2], keep, config, FEATURES)
    with pytest.raises(Exception, match="unknown --inner-by"):
        rounds_by_cv(sets, keep, TrainConfig(sets=[], out="", inner_by="collections"), FEATURES)


def test_members_differ_by_seed_share_the_rounds_of_their_mean_curve_and_average_their_scores(tmp_path):
    """--members 3: each member (seeds 5, 1005, 2005) draws its own inner folds with its seed, fold k's curve is the
    mean of the members' fold k (repeated cross-validation), the rounds chosen on it; three boosters of that many
    rounds are trained, saved as model.txt, model.1.txt, model.2.txt, and the loaded model scores the mean of the
    three. One member is the model of before."""
    from weir.ranker.rerankers.ltr import LTRModel
    from weir.training.ltr import TrainConfig
    from weir.training.ltr.config import member_seeds
    from weir.training.ltr.rounds import rounds_by_cv
    from weir.training.ltr.trainer import fit_on

    sets = [_examples(3, 24), _examples(4, 9, prefix="small")]
    keep = set(sets[0].qids)
    config = TrainConfig(sets=[], out="", rounds=40, inner_folds=3, seed=5, rounds_rule="best", members=3)
    assert member_seeds(config) == [5, 1005, 2005]
    rounds, value, _ = rounds_by_cv(sets, keep, config, FEATURES)
    from weir.evaluation.folds import folds_of

    def split(s):  # the inner folds of the member of seed s
        return [folds_of(sorted(set(ex.qids)), 3, s + 1 + j) for j, ex in enumerate(sets)]

    table = np.array([np.mean([_curve([ex.select(set(ex.qids) - split(s)[j][k]) for j, ex in enumerate(sets)],
                                      [ex.select(split(s)[j][k]) for j, ex in enumerate(sets)], s, 40)
                               for s in (5, 1005, 2005)], axis=0) for k in range(3)])
    mean = table.mean(axis=0)
    assert rounds == int(np.argmax(mean)) + 1 and value == pytest.approx(mean.max())
    boosters, info = fit_on(sets, keep, config, FEATURES)
    assert len(boosters) == 3 and info["members"] == 3 and {b.current_iteration() for b in boosters} == {rounds}
    X = sets[0].X[:40]
    alone = [b.predict(X) for b in boosters]
    assert not np.allclose(alone[0], alone[1])  # the seeds sample rows and features differently
    LTRModel(boosters, FEATURES, {}).save(tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").glob("model*.txt")) == ["model.1.txt", "model.2.txt", "model.txt"]
    np.testing.assert_allclose(LTRModel.load(tmp_path / "m").predict(X), np.mean(alone, axis=0), rtol=1e-6)
    LTRModel(boosters[:1], FEATURES, {}).save(tmp_path / "m")  # a one-member model saved over it leaves no stale member
    assert [p.name for p in (tmp_path / "m").glob("model*.txt")] == ["model.txt"]
    np.testing.assert_allclose(LTRModel.load(tmp_path / "m").predict(X), alone[0], rtol=1e-6)
    one = TrainConfig(sets=[], out="", rounds=40, inner_folds=3, seed=5, rounds_rule="best")
    assert member_seeds(one) == [5]
    with pytest.raises(Exception, match="at least 1"):
        member_seeds(TrainConfig(sets=[], out="", members=0))


def test_one_standard_error_rule_keeps_a_strong_init_feature_alone():
    """Boosting from a feature that already ranks by the labels' source, trees gain less than the folds' noise: the
    one-standard-error rule keeps 0 rounds (the feature alone), where ``best`` takes trees."""
    from weir.training.ltr import TrainConfig
    from weir.training.ltr.rounds import rounds_by_cv

    ex = _examples(7, 30)
    ex.X[:, FEATURES.index("first_score_norm")] = ex.X[:, 0]
    chosen = {}
    for rule in ("best", "1se"):
        config = TrainConfig(sets=[], out="", rounds=30, inner_folds=4, seed=5, init_from="first_score_norm",
                             rounds_rule=rule)
        chosen[rule], value, detail = rounds_by_cv([ex], set(ex.qids), config, FEATURES)
    assert chosen["best"] > 0 and detail["best_inner_ndcg@10"] - detail["init_inner_ndcg@10"] < detail["standard_error"]
    assert chosen["1se"] == 0 and value == pytest.approx(detail["init_inner_ndcg@10"], abs=1e-4)


def test_our_ndcg_is_lightgbms():
    """The round-0 figure (an init feature alone) is computed as LightGBM computes its validation nDCG@10."""
    import lightgbm as lgb

    from weir.training.ltr.boosting import ndcg_at_10

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = rng.integers(0, 4, size=300).astype(float)
    groups = [30] * 10
    params = {"objective": "lambdarank", "metric": "ndcg", "ndcg_eval_at": [10], "verbose": -1, "learning_rate": 1e-12,
              "label_gain": [float(2 ** i - 1) for i in range(32)], "num_threads": 1}
    init = X[:, 1].copy()
    record: dict = {}
    dtrain = lgb.Dataset(X, y, group=groups, init_score=init)
    lgb.train(params, dtrain, 1, valid_sets=[lgb.Dataset(X, y, group=groups, init_score=init, reference=dtrain)],
              valid_names=["v"], callbacks=[lgb.record_evaluation(record)])
    assert ndcg_at_10(init, y, groups) == pytest.approx(record["v"]["ndcg@10"][0], abs=1e-9)  # one tree at lr 1e-12


def test_no_tree_beats_a_strong_init_feature_then_the_model_is_that_feature(tmp_path):
    """Labels that follow one feature exactly and noise elsewhere: boosting from that feature, inner CV keeps 0
    rounds, and the saved model ranks exactly by the feature; monotone constraints reach LightGBM."""
    from weir.ranker.rerankers.ltr import LTRModel
    from weir.training.ltr import TrainConfig
    from weir.training.ltr.boosting import monotone_constraints
    from weir.training.ltr.config import booster_params
    from weir.training.ltr.examples import Examples
    from weir.training.ltr.trainer import fit_on

    rng = np.random.default_rng(1)
    n_q, per = 20, 15
    X = rng.normal(size=(n_q * per, len(FEATURES))).astype(np.float32)
    col = FEATURES.index("dense_cos")
    y = np.zeros(len(X), dtype=np.float32)
    for q in range(n_q):
        rows = np.arange(q * per, (q + 1) * per)
        y[rows[np.argsort(-X[rows, col])[:3]]] = [3, 2, 1]  # the feature's top 3 are the relevant ones
    qids = [f"q{i // per}" for i in range(len(X))]
    ex = Examples([Query(f"q{i}", "") for i in range(n_q)], Run(), X, y, qids)
    config = TrainConfig(sets=[], out="", rounds=30, inner_folds=3, seed=2, init_from="dense_cos", monotone=True)
    assert booster_params(config, FEATURES)["monotone_constraints"] == monotone_constraints(FEATURES)
    assert monotone_constraints(FEATURES)[FEATURES.index("first_rank")] == -1
    (booster,), info = fit_on([ex], set(qids), config, FEATURES)
    assert info["rounds"] == 0 and info["inner_cv_ndcg@10"] == pytest.approx(1.0)
    LTRModel(booster, FEATURES, {}, init_from="dense_cos", rounds=0).save(tmp_path / "m")
    model = LTRModel.load(tmp_path / "m")
    scores = model.predict(X[:per], qids[:per])
    assert list(np.argsort(-scores)) == list(np.argsort(-X[:per, col]))


def test_the_risk_is_chosen_out_of_fold_by_urisk():
    """Several members: each training row is scored by every member's inner-fold booster that never saw its query
    (out of fold, at the chosen rounds); the risk recorded is the grid's best mean URisk over the sets (against the
    candidates' order), recomputed here from those scores by hand; ties go to the smaller risk."""
    from weir.evaluation.risk import urisk_of
    from weir.training.ltr import TrainConfig
    from weir.training.ltr.boosting import ndcg_at_10_per_query
    from weir.training.ltr.risk import RISK_GRID, choose_risk, out_of_fold
    from weir.training.ltr.rounds import rounds_by_cv
    from weir.training.ltr.trainer import fit_on

    sets = [_examples(3, 24), _examples(4, 9, prefix="small")]
    keep = set(sets[0].qids)
    config = TrainConfig(sets=[], out="", rounds=30, inner_folds=3, seed=5, rounds_rule="best", members=3)
    fits: list = []
    rounds, _, _ = rounds_by_cv(sets, keep, config, FEATURES, fits)
    assert len(fits) == 3 * 3  # a booster per member and inner fold
    oof = out_of_fold(sets, fits, 3, rounds)
    for ex, scores in zip(sets, oof):
        rows, _ = ex.rows(set(ex.qids))
        assert not np.isnan(scores[:, rows]).any()  # every member scored every judged row, once
    for m, booster, validated in fits:  # ... by the booster of the fold that held its query out
        for j, held in validated:
            rows, _ = sets[j].rows(held)
            np.testing.assert_array_equal(oof[j][m, rows], booster.predict(sets[j].X[rows], num_iteration=rounds))
    chosen, record = choose_risk(sets, [keep, set(sets[1].qids)], oof, None, 5.0)
    by_hand = {}
    for r in RISK_GRID:
        values = []
        for ex, scores in zip(sets, oof):
            rows, groups = ex.rows(set(ex.qids))
            s = scores[:, rows].mean(axis=0) - r * scores[:, rows].std(axis=0)
            first = -np.concatenate([np.arange(n, dtype=float) for n in groups])
            y = ex.y[rows]
            values.append(urisk_of(ndcg_at_10_per_query(s, y, groups) - ndcg_at_10_per_query(first, y, groups)))
        by_hand[r] = np.mean(values)
    assert record["urisk"] == {str(r): round(v, 5) for r, v in by_hand.items()}
    assert chosen == min(r for r, v in by_hand.items() if v == max(by_hand.values()))
    _, info = fit_on(sets, keep, config, FEATURES)
    assert info["risk"] == chosen and info["risk_choice"]["chosen"] == chosen
    _, fixed = fit_on(sets, keep, TrainConfig(sets=[], out="", rounds=30, inner_folds=3, seed=5, rounds_rule="best",
                                              members=3, risk=0.25), FEATURES)
    assert fixed["risk"] == 0.25 and "risk_choice" not in fixed
    with pytest.raises(Exception, match="several members"):
        TrainConfig(sets=[], out="", risk=1.0)



def test_members_may_each_train_on_a_share_of_the_queries(monkeypatch):
    """member_queries below 1: each member fits a share of every set's training queries, drawn by its own seed (in
    the inner folds and in the final fit), so the members differ in what they saw; 1 is every query."""
    from weir.training.ltr import TrainConfig
    from weir.training.ltr.config import member_sample, member_seeds
    from weir.training.ltr import trainer

    sets = [_examples(3, 24), _examples(4, 9, prefix="small")]
    config = TrainConfig(sets=[], out="", rounds=10, inner_folds=3, seed=5, rounds_rule="best", members=3,
                         member_queries=0.5)
    pools = [set(ex.qids) for ex in sets]
    samples = [[member_sample(config, m, j, pool, 2) for j, pool in enumerate(pools)] for m in range(3)]
    assert all(len(sample[0]) == 12 and sample[0] <= pools[0] for sample in samples)
    assert samples[0][0] != samples[1][0] and samples[0] == [member_sample(config, 0, j, p, 2) for j, p in enumerate(pools)]
    assert member_sample(TrainConfig(sets=[], out=""), 0, 0, pools[0], 2) == pools[0]
    fitted = {}  # the final fits: seed -> rows trained on

    def fit(parts, *args, seed, **kwargs):
        fitted[seed] = sum(len(p[0]) for p in parts)
        return real(parts, *args, seed=seed, **kwargs)

    real = trainer.fit
    monkeypatch.setattr(trainer, "fit", fit)
    trainer.fit_on(sets, pools[0], config, FEATURES)
    judged = [sum(len(ex.rows(keep)[0]) for ex, keep in zip(sets, sample)) for sample in samples]
    assert [fitted[s] for s in member_seeds(config)] == judged  # each member its own share's judged rows
    for share in (0, 1.5):
        with pytest.raises(Exception, match="member_queries"):
            TrainConfig(sets=[], out="", member_queries=share)


def test_members_may_each_leave_a_training_set_out(monkeypatch):
    """member_sets: member m never sees set m mod the number of sets, in its inner folds or its final fit, so the
    members differ in the collections they saw; its inner folds still validate that set's queries (a booster that never
    saw any of them), so every judged row keeps one out-of-fold score per member for the risk's choice."""
    from weir.training.ltr import TrainConfig
    from weir.training.ltr.config import left_out_set, member_sample
    from weir.training.ltr import trainer
    from weir.training.ltr.risk import out_of_fold
    from weir.training.ltr.rounds import rounds_by_cv

    sets = [_examples(3, 24), _examples(4, 9, prefix="small")]
    pools = [set(ex.qids) for ex in sets]
    config = TrainConfig(sets=[], out="", rounds=10, inner_folds=3, seed=5, rounds_rule="best", members=3,
                         member_sets=True)
    assert [left_out_set(config, m, 2) for m in range(3)] == [0, 1, 0]
    assert [[member_sample(config, m, j, p, 2) for j, p in enumerate(pools)] for m in range(3)] == [
        [set(), pools[1]], [pools[0], set()], [set(), pools[1]]]
    seen = []  # per fit: the rows trained on

    def fit(parts, *args, **kwargs):
        seen.append(sum(len(p[0]) for p in parts))
        return real(parts, *args, **kwargs)

    real = trainer.fit
    monkeypatch.setattr(trainer, "fit", fit)
    trainer.fit_on(sets, pools[0], config, FEATURES)
    judged = [len(ex.rows(pool)[0]) for ex, pool in zip(sets, pools)]
    assert seen == [judged[1], judged[0], judged[1]]  # the final fits: each member without its left-out set
    from weir.training.ltr import rounds as rounds_module

    inner = []  # per inner fit: the rows of each set trained on

    def inner_fit(parts, *args, **kwargs):
        inner.append([len(p[0]) for p in parts])
        return real_inner(parts, *args, **kwargs)

    real_inner = rounds_module.fit
    monkeypatch.setattr(rounds_module, "fit", inner_fit)
    fits: list = []
    rounds, _, _ = rounds_by_cv(sets, pools[0], config, FEATURES, fits)
    for (m, _, validated), rows in zip(fits, inner):  # no inner fold of a member trains on its left-out set ...
        assert rows[m % 2] == 0 and rows[1 - m % 2] > 0
        assert [j for j, _ in validated] == [0, 1]  # ... and each validates both sets' queries of its fold
    for ex, scores in zip(sets, out_of_fold(sets, fits, 3, rounds)):
        assert not np.isnan(scores[:, ex.rows(set(ex.qids))[0]]).any()
    with pytest.raises(Exception, match="at least 2 members"):
        TrainConfig(sets=[], out="", member_sets=True)
    with pytest.raises(Exception, match="at least 2 sets"):
        left_out_set(config, 0, 1)
