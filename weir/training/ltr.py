"""`weir train ltr`: LightGBM lambdarank over :mod:`weir.ranker.rerankers.ltr_features`, the number of rounds chosen by
inner cross-validation (or early stopping on held-out queries), optional k-fold cross-validation over queries, and a
model card.

Training data are one or more sets of (index, topics, qrels, candidates): candidates come from a TREC run
(``candidates``) or from a first stage run over the index (``first_stage``, default ``hybrid``), top ``depth``
each. Labels are the qrels grades (unjudged = 0). Queries with no relevant candidate carry no ranking signal and are
left out of training and validation (never out of a cross-validated run, which scores every query).

Cross-validation (``folds``): the queries of the first set are split into ``folds`` folds (seeded shuffle); each fold
is scored by a model trained on the other folds (plus any further sets, which never contain the first set's
queries); the scored folds are concatenated into one run. The saved model is then trained on every query.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from weir.ranker.options import PipelineOptions
from weir.ranker.rerankers.ltr import LTRModel, base_scores, predict_members, query_groups
from weir.ranker.rerankers.ltr_features import DIRECTION, FEATURES, STAGE_SCORES, FeatureExtractor
from weir.ranker.stage import apply_scores
from weir.evaluation.folds import folds_of, split
from weir.training.common import TrainingSet, cross_validate, seeds_of_members
from weir.core.provenance import model_card, sha256_file
from weir.core.trec import read_qrels, read_topics
from weir.core.types import InputError, Query, Run

DEFAULT_PARAMS = {
    "objective": "lambdarank", "metric": "ndcg", "ndcg_eval_at": [10], "learning_rate": 0.05, "num_leaves": 15,
    "min_data_in_leaf": 20, "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1,
    "lambdarank_truncation_level": 20, "verbose": -1, "num_threads": 1,
}


# the fields of a training set that LTR reads, as its card's training_data records them; it needs an index
SET_FIELDS = ("index", "topics", "qrels", "candidates", "first_stage", "depth", "max_queries", "stage_runs")


@dataclass
class Examples:
    """Feature rows of one training set, grouped by query (rows of a query contiguous, in candidate order)."""

    queries: list[Query]
    run: Run
    X: np.ndarray
    y: np.ndarray
    qids: list[str]
    feature_seconds: float = 0.0

    def select(self, keep: set[str], *, positive_only: bool = True) -> tuple[np.ndarray, np.ndarray, list[int]]:
        """Rows and group sizes of the queries in ``keep`` (with ``positive_only``, those with a relevant row)."""
        qids = np.asarray(self.qids)
        chosen, groups = [], []
        start = 0
        while start < len(qids):
            end = start
            while end < len(qids) and qids[end] == qids[start]:
                end += 1
            if qids[start] in keep and (not positive_only or self.y[start:end].max() > 0):
                chosen.append(np.arange(start, end))
                groups.append(end - start)
            start = end
        idx = np.concatenate(chosen) if chosen else np.zeros(0, dtype=int)
        return self.X[idx], self.y[idx], groups


def load_examples(ds: TrainingSet, options: PipelineOptions | None = None,
                  log: Callable[[str], None] = print) -> Examples:
    """Candidates and features of one training set (labels from its qrels)."""
    from weir.indexer.index_dir import Index
    from weir.ranker import registry

    index = Index(ds.index)
    queries = read_topics(ds.topics)
    qrels = read_qrels(ds.qrels)
    queries = [q for q in queries if q.id in qrels]
    if ds.max_queries and len(queries) > ds.max_queries:
        rng = np.random.default_rng(7)
        keep = set(rng.choice(len(queries), ds.max_queries, replace=False).tolist())
        queries = [q for i, q in enumerate(queries) if i in keep]
    if not queries:
        raise InputError(f"{ds.topics}: no topic has qrels in {ds.qrels}")
    start = time.perf_counter()
    if ds.candidates:
        run = Run.read_trec(ds.candidates).truncated(ds.depth)
    else:
        stage = registry.build(ds.first_stage, index, options)
        run = stage(queries, k=ds.depth)
    retrieve = time.perf_counter() - start
    attach_stage_scores(run, ds.stage_runs)
    extractor = FeatureExtractor(index)
    start = time.perf_counter()
    X, rows = extractor.extract(queries, run, ds.depth)
    seconds = time.perf_counter() - start
    y = np.asarray([max(0, qrels.get(qid, {}).get(run[qid][i].doc_id, 0)) for qid, i in rows], dtype=np.float32)
    log(f"{ds.topics}: {len(queries)} queries, {len(rows)} candidates ({'run ' + ds.candidates if ds.candidates else ds.first_stage} "
        f"top {ds.depth}, {retrieve:.1f}s); features {seconds:.1f}s ({seconds / max(1, len(queries)) * 1000:.1f} ms/query)")
    return Examples(queries, run, X, y, [qid for qid, _ in rows], seconds)


def attach_stage_scores(run: Run, spec: str | None) -> None:
    """Record the scores that other runs give the candidates as ``Hit.stage_scores[NAME]`` (``spec``:
    ``NAME:RUN[;NAME:RUN]``), as a pipeline's earlier stage would have: how a cross-validated run of another reranker
    (e.g. ``attention:runs/attention-cv.trec``) becomes an LTR feature. A candidate missing from such a run gets none."""
    for part in (spec or "").split(";"):
        if not part.strip():
            continue
        name, sep, path = part.partition(":")
        name = name.strip()
        if not sep or name not in STAGE_SCORES:
            raise InputError(f"bad stage run {part!r}: expected NAME:RUN with NAME one of {', '.join(STAGE_SCORES)}")
        other = Run.read_trec(path.strip())
        for qid, hits in run.items():
            scores = {h.doc_id: h.score for h in other.get(qid, [])}
            for h in hits:
                if h.doc_id in scores:
                    h.stage_scores[name] = scores[h.doc_id]


def ndcg_at_10(scores: np.ndarray, labels: np.ndarray, groups: Sequence[int]) -> float:
    """LightGBM's ``ndcg@10`` (gains 2^label - 1, a query without a relevant row counting 1), averaged over the
    queries: what its validation curve reports, for rows scored otherwise (an init feature alone)."""
    values, start = [], 0
    for n in groups:
        s, y = scores[start:start + n], labels[start:start + n]
        start += n
        discount = 1 / np.log2(np.arange(2, min(10, n) + 2))
        ideal = ((2 ** np.sort(y)[::-1][:10] - 1) * discount).sum()
        got = ((2 ** y[np.argsort(-s, kind="stable")][:10] - 1) * discount).sum()
        values.append(got / ideal if ideal > 0 else 1.0)
    return float(np.mean(values)) if values else float("nan")


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

    def stack(parts):
        parts = [p for p in parts if len(p[0])]
        if not parts:
            return None
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
                [g for p in parts for g in p[2]])

    train = stack(train_parts)
    if train is None:
        raise InputError("no training query has a relevant candidate: check the qrels and the candidates")
    params = {**DEFAULT_PARAMS, **(params or {}), "seed": seed, **({"num_threads": threads} if threads else {})}
    label_max = int(max(train[1].max(), 1))
    params.setdefault("label_gain", [float(2 ** i - 1) for i in range(max(label_max + 1, 32))])
    dtrain = lgb.Dataset(train[0], train[1], group=train[2], feature_name=list(features), free_raw_data=False,
                         init_score=base_scores(train[0], train[2], init_col))
    valid = stack(valid_parts)
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


@dataclass
class TrainConfig:
    sets: list[TrainingSet]  # checked against SET_FIELDS
    out: str
    folds: int = 0
    cv_run: str | None = None
    val_fraction: float = 0.2
    seed: int = 13
    rounds: int = 1000
    early_stopping: int = 50
    params: dict = field(default_factory=dict)
    options: PipelineOptions = field(default_factory=PipelineOptions)  # of the first stages giving candidates
    rounds_by: str = "cv"  # cv: inner cross-validation over the training queries; holdout: early stopping
    rounds_rule: str = "1se-paired"  # cv: the fewest rounds within one (paired) standard error of the best, or best
    init_from: str | None = None  # boost from this feature (standardized per query) instead of from zero
    monotone: bool = False  # constrain every feature of known direction (DIRECTION) to act in that direction
    inner_folds: int = 4
    inner_by: str = "queries"  # cv: inner folds of every set's queries, or one whole training set held out at a time
    binary_min_rel: int = 1
    members: int = 1  # boosters that differ only in their seed (member_seeds), their scores averaged
    command: list[str] = field(default_factory=list)


def member_seeds(config: TrainConfig) -> list[int]:
    """The seeds of the members (:func:`seeds_of_members`); each member's LightGBM row and feature sampling, and its
    inner folds (:func:`rounds_by_cv`)."""
    return seeds_of_members(config.seed, config.members)


def _score(boosters, ex: Examples, keep: set[str], init_col: int | None = None, *,
           rounds: int | None = None) -> dict[str, list[float]]:
    rows = [i for i, q in enumerate(ex.qids) if q in keep]
    if rounds == 0:  # the init feature alone
        preds = np.zeros(len(rows))
    else:
        preds = predict_members(boosters, ex.X[rows]) if rows else []
    base = base_scores(ex.X[rows], query_groups([ex.qids[i] for i in rows]), init_col) if rows else None
    if base is not None:
        preds = preds + base
    out: dict[str, list[float]] = {}
    for i, s in zip(rows, preds):
        out.setdefault(ex.qids[i], []).append(float(s))
    return out


ROUNDS_RULES = ("1se", "1se-paired", "best")
INNER_BY = ("queries", "sets")


def inner_splits(data: list[Examples], main_keep: set[str], config: TrainConfig, seed: int | None = None):
    """The inner folds of :func:`rounds_by_cv`, as (training parts, validation parts) pairs.

    ``config.inner_by`` ``"queries"``: ``config.inner_folds`` folds of every set's queries (the first set's:
    ``main_keep``), drawn with ``seed`` (default ``config.seed``); fold k trains on the other folds of every set and
    validates on fold k of each set.
    ``"sets"``: leave one set out, one fold per training set; fold k trains on every other set and validates on set k
    alone, so the rounds chosen are those that carry over to a collection the trees never saw (what a shipped model
    meets), not to more queries of the collections they fit."""
    pools = [set(main_keep)] + [set(ex.qids) for ex in data[1:]]
    if config.inner_by == "sets":
        if len(data) < 3:
            raise InputError(f"--inner-by sets holds out one training set at a time and needs at least 3 sets "
                             f"(--also), got {len(data)}")
        return [([ex.select(pools[j]) for j, ex in enumerate(data) if j != k], [data[k].select(pools[k])])
                for k in range(len(data))]
    if config.inner_by != "queries":
        raise InputError(f"unknown --inner-by {config.inner_by!r}; known: {', '.join(INNER_BY)}")
    seed = config.seed if seed is None else seed
    folds = [folds_of(sorted(pool), config.inner_folds, seed + 1 + j) for j, pool in enumerate(pools)]
    return [([ex.select(pools[j] - folds[j][k]) for j, ex in enumerate(data)],
             [ex.select(folds[j][k]) for j, ex in enumerate(data)]) for k in range(config.inner_folds)]


def rounds_by_cv(data: list[Examples], main_keep: set[str], config: TrainConfig, features) -> tuple[int, float, dict]:
    """The number of boosting rounds, by inner cross-validation (:func:`inner_splits`): with ``inner_by="queries"``
    every set's training queries (the first set's: ``main_keep``) are split into ``config.inner_folds`` folds, the
    model of inner fold k trains on the other folds of every set and is scored on fold k of each set, the sets
    counting equally (a collection of 35 queries weighs as much as one of 1,000: the model is meant to carry over to
    each); with ``inner_by="sets"`` each inner fold is one whole training set, scored by a model of the others.
    Boosting from an init feature, 0 rounds (the feature alone) is a candidate too. With several members
    (``config.members``), each member draws its own inner folds with its seed (repeated cross-validation: the rounds
    hang less on one split of a small set) and fold k's curve is the mean of the members' fold k. ``config.rounds_rule``
    ``"best"``: the rounds of the best mean nDCG@10; ``"1se"``: the fewest rounds whose mean is within one standard
    error (over the inner folds) of the best (the one-standard-error rule, Hastie, Tibshirani and Friedman, *The
    Elements of Statistical Learning*, 7.10), so trees must beat the feature alone by more than the folds disagree;
    ``"1se-paired"``: the fewest rounds whose shortfall from the best, fold by fold, is within one standard error of
    that paired difference (the folds' common level of difficulty cancels, so a gain the folds agree on counts even
    where it is smaller than their spread). Returns (rounds, their mean, the details)."""
    init_col = _init_col(config, features)
    by_fold: list[list[np.ndarray]] = []  # per inner fold k, per member: [round 0 (init feature), round 1, ...]
    for seed in member_seeds(config):  # each member its own inner folds (repeated cross-validation)
        for k, (train_parts, valid_parts) in enumerate(inner_splits(data, main_keep, config, seed)):
            if len(by_fold) <= k:
                by_fold.append([])
            if not any(p[2] for p in valid_parts) or not any(p[2] for p in train_parts):
                continue
            _, info = fit(train_parts, valid_parts, features, params=_params(config, features), rounds=config.rounds,
                          early_stopping=None, seed=seed, init_col=init_col, separate_valid=True)
            curve = np.mean(info["valid_curves"], axis=0)  # the mean over the sets scored
            by_fold[k].append(np.concatenate([[np.mean(info["valid_inits"])], curve]) if init_col is not None
                              else curve)
    rows = [np.mean(curves, axis=0) for curves in by_fold if curves]  # fold k: the mean over the members
    if not rows:
        raise InputError("no inner fold has a query with a relevant candidate")
    table = np.array(rows)
    first = 0 if init_col is not None else 1  # the rounds of column 0
    mean = table.mean(axis=0)
    best = int(np.argmax(mean))  # the first maximum: ties go to fewer rounds
    se = float(table[:, best].std(ddof=1) / np.sqrt(len(table))) if len(table) > 1 else 0.0
    chosen = best
    if config.rounds_rule == "1se":
        chosen = int(np.flatnonzero(mean >= mean[best] - se)[0])
    elif config.rounds_rule == "1se-paired" and len(table) > 1:
        shortfall = table[:, [best]] - table  # (folds, rounds): how far each candidate is below the best, per fold
        paired_se = shortfall.std(axis=0, ddof=1) / np.sqrt(len(table))
        chosen = int(np.flatnonzero(shortfall.mean(axis=0) <= paired_se)[0])
        se = float(paired_se[chosen])
    detail = {"rule": config.rounds_rule, "inner_by": config.inner_by, "folds_scored": len(table),
              "best_rounds": best + first, "best_inner_ndcg@10": round(float(mean[best]), 4),
              "standard_error": round(se, 4), "sets_scored": len(data)}
    if init_col is not None:
        detail["init_inner_ndcg@10"] = round(float(mean[0]), 4)
    return chosen + first, float(mean[chosen]), detail


def _params(config: TrainConfig, features: Sequence[str]) -> dict:
    """The LightGBM parameters of a training: the defaults, the user's, and the monotone constraints when asked."""
    params = dict(config.params)
    if config.monotone:
        params.update({"monotone_constraints": monotone_constraints(features),
                       "monotone_constraints_method": "intermediate"})
    return params


def _fit_on(data: list[Examples], main_keep: set[str], config: TrainConfig, features) -> tuple[list, dict]:
    """Fit on ``main_keep`` queries of the first set plus all of the others: the boosters (one per member) and a
    record. The number of rounds comes from inner cross-validation (``rounds_by="cv"``), the same for every member,
    or from early stopping on a held-out share of each set (``"holdout"``), each member its own."""
    seeds = member_seeds(config)
    if config.rounds_by == "cv":
        if config.rounds_rule not in ROUNDS_RULES:
            raise InputError(f"unknown rounds rule {config.rounds_rule!r}; known: {', '.join(ROUNDS_RULES)}")
        rounds, inner, detail = rounds_by_cv(data, main_keep, config, features)
        parts = [data[0].select(main_keep)] + [ex.select(set(ex.qids)) for ex in data[1:]]
        fits = [fit(parts, [], features, params=_params(config, features), rounds=max(rounds, 1), seed=seed,
                    init_col=_init_col(config, features)) for seed in (seeds if rounds else seeds[:1])]
        info = fits[0][1]
        info.update({"best_iteration": rounds, "rounds": rounds, "inner_cv_ndcg@10": round(inner, 4),
                     "inner_folds": len(data) if config.inner_by == "sets" else config.inner_folds,
                     "inner_by": config.inner_by, "inner_cv": detail, "members": len(fits)})
        return [b for b, _ in fits], info
    train_parts, valid_parts = [], []
    for j, ex in enumerate(data):
        pool = main_keep if j == 0 else set(ex.qids)
        tr, va = split(sorted(pool), config.val_fraction, config.seed + j)
        train_parts.append(ex.select(tr))
        valid_parts.append(ex.select(va))
    fits = [fit(train_parts, valid_parts, features, params=_params(config, features), rounds=config.rounds,
                early_stopping=config.early_stopping, seed=seed, init_col=_init_col(config, features))
            for seed in seeds]
    info = fits[0][1]
    if len(fits) > 1:
        info.update({"members": len(fits), "member_best_iterations": [i["best_iteration"] for _, i in fits],
                     "valid_ndcg@10": None})
    return [b for b, _ in fits], info


def _init_col(config: TrainConfig, features: Sequence[str]) -> int | None:
    if not config.init_from:
        return None
    if config.init_from not in features:
        raise InputError(f"--init-from {config.init_from!r} is not a feature ({', '.join(features)})")
    return list(features).index(config.init_from)


def train(config: TrainConfig, log: Callable[[str], None] = print) -> dict:
    """Train (and cross-validate); write the model directory; return the model card."""
    if not config.sets:
        raise InputError("weir train ltr needs at least one training set")
    if config.folds == 1 or config.folds < 0:
        raise InputError("--folds must be 0 (no cross-validation) or at least 2")
    member_seeds(config)  # refuses --members below 1 before any feature is computed
    for ds in config.sets:
        ds.checked("weir train ltr", needs=("index",), takes=SET_FIELDS)
    started = time.perf_counter()
    data = [load_examples(ds, config.options, log) for ds in config.sets]
    feature_seconds = time.perf_counter() - started
    main, main_ds = data[0], config.sets[0]
    all_main = set(main.qids)
    card = model_card(
        "ltr", model="LightGBM lambdarank", features=list(FEATURES), dists=("lightgbm",), command=config.command,
        training_data=[{**ds.record(SET_FIELDS), "topics_sha256": sha256_file(ds.topics), "qrels_sha256": sha256_file(ds.qrels),
                        "queries": len(ex.queries), "candidates": len(ex.qids)} for ds, ex in zip(config.sets, data)],
        parameters={**DEFAULT_PARAMS, **_params(config, FEATURES), "rounds": config.rounds,
                    "rounds_by": config.rounds_by, "rounds_rule": config.rounds_rule,
                    "inner_folds": config.inner_folds, "inner_by": config.inner_by, "init_from": config.init_from,
                    "monotone": config.monotone,
                    "early_stopping": config.early_stopping, "val_fraction": config.val_fraction,
                    "seed": config.seed, "members": config.members, "member_seeds": member_seeds(config)})
    if config.folds:
        init_col = _init_col(config, FEATURES)

        def fit_and_score(train_q: set[str], test: set[str]) -> tuple[Run, dict]:
            boosters, info = _fit_on(data, train_q, config, FEATURES)
            log(f"  {info['train_queries']} training queries, {rounds_note(info)}")
            queries = [q for q in main.queries if q.id in test]
            candidates = Run({q.id: main.run.get(q.id, [])[:main_ds.depth] for q in queries})
            scores = _score(boosters, main, test, init_col, rounds=info.get("rounds"))
            return apply_scores(queries, candidates, main_ds.depth, scores, "ltr"), info

        cv_start = time.perf_counter()
        card["metrics"]["cross_validation"] = cross_validate(
            "ltr", all_main, config.folds, config.seed, fit_and_score, first_run=main.run,
            qrels=read_qrels(main_ds.qrels), measures=["nDCG@10", "RR@10", "AP", "R@100"],
            binary_min_rel=config.binary_min_rel, cv_run=config.cv_run, log=log)
        card["metrics"]["cross_validation"]["seconds"] = round(time.perf_counter() - cv_start, 2)
    t0 = time.perf_counter()
    boosters, info = _fit_on(data, all_main, config, FEATURES)
    train_seconds = time.perf_counter() - t0
    gain = np.sum([b.feature_importance("gain") for b in boosters], axis=0)
    importance = sorted(zip(FEATURES, (float(g) for g in gain)), key=lambda x: -x[1])
    total = sum(g for _, g in importance) or 1.0
    card["metrics"]["final"] = info
    card["importance_gain"] = {n: round(g / total, 4) for n, g in importance}
    card["timing"] = {"feature_seconds": round(feature_seconds, 2), "final_train_seconds": round(train_seconds, 2),
                      "feature_ms_per_query": round(1000 * sum(ex.feature_seconds for ex in data)
                                                    / max(1, sum(len(ex.queries) for ex in data)), 2)}
    # keeps the trees up to the best iteration; 0 rounds: the init feature alone
    LTRModel(boosters, FEATURES, card, init_from=config.init_from, rounds=info.get("rounds")).save(config.out)
    log("feature importance (gain share): " + ", ".join(f"{n} {g:.3f}" for n, g in card["importance_gain"].items()))
    return card


def rounds_note(info: dict) -> str:
    """How the number of boosting rounds was chosen, in words."""
    if "inner_cv_ndcg@10" in info:
        what = f"{info['best_iteration']} rounds" if info["best_iteration"] else "0 rounds (the init feature alone)"
        d = info.get("inner_cv", {})
        why = ""
        if d.get("rule") == "1se" and d["best_rounds"] != info["best_iteration"]:
            why = f"; best {d['best_rounds']} rounds {d['best_inner_ndcg@10']:.4f}, one standard error {d['standard_error']:.4f}"
        folds = "leave-one-set-out" if info.get("inner_by") == "sets" else f"{info['inner_folds']}-fold"
        members = f" x {info['members']} members" if info.get("members", 1) > 1 else ""
        return f"{what}{members} (inner {folds} CV nDCG@10 {info['inner_cv_ndcg@10']:.4f}{why})"
    if info.get("members", 1) > 1:
        return f"{info['members']} members, best iterations {info['member_best_iterations']}"
    return f"best iteration {info['best_iteration']}, validation nDCG@10 {info['valid_ndcg@10'] or float('nan'):.4f}"
