"""`train`: the training sets read, cross-validation over the first set's queries when asked, the final fit of the
members on every query, the model and its card written; :func:`fit_on` (the members fitted on some queries) and
:func:`score_boosters` (their scores), which research scripts use as they are."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from weir.ranker.rerankers.ltr import LTRModel, per_query
from weir.ranker.rerankers.ltr_features import FEATURES
from weir.ranker.stage import apply_scores
from weir.evaluation.folds import split
from weir.training.common import cross_validate
from weir.training.ltr.boosting import DEFAULT_PARAMS, fit
from weir.training.ltr.config import (
    ROUNDS_RULES,
    SET_FIELDS,
    TrainConfig,
    booster_params,
    init_column,
    member_sample,
    member_seeds,
)
from weir.training.ltr.examples import Examples, load_examples
from weir.training.ltr.risk import choose_risk, out_of_fold
from weir.training.ltr.rounds import rounds_by_cv, training_pools
from weir.core.provenance import model_card, sha256_file
from weir.core.trec import read_qrels
from weir.core.types import InputError, Run


def fit_on(data: list[Examples], main_keep: set[str], config: TrainConfig, features) -> tuple[list, dict]:
    """Fit on ``main_keep`` queries of the first set plus all of the others: the boosters (one per member) and a
    record. The number of rounds comes from inner cross-validation (``rounds_by="cv"``), the same for every member,
    or from early stopping on a held-out share of each set (``"holdout"``), each member its own. Several members and
    ``rounds_by="cv"``: the risk the model ranks by (``info["risk"]``), ``config.risk`` or chosen on the training
    queries out of fold (:mod:`weir.training.ltr.risk`)."""
    seeds = member_seeds(config)
    if config.rounds_by == "cv":
        if config.rounds_rule not in ROUNDS_RULES:
            raise InputError(f"unknown rounds rule {config.rounds_rule!r}; known: {', '.join(ROUNDS_RULES)}")
        inner_fits: list = []
        rounds, inner, detail = rounds_by_cv(data, main_keep, config, features, inner_fits)
        pools = training_pools(data, main_keep)
        fits = [fit(_member_parts(data, config, m, pools), [], features, params=booster_params(config, features),
                    rounds=max(rounds, 1), seed=seed, init_col=init_column(config, features))
                for m, seed in enumerate(seeds if rounds else seeds[:1])]
        info = fits[0][1]
        info.update({"best_iteration": rounds, "rounds": rounds, "inner_cv_ndcg@10": round(inner, 4),
                     "inner_folds": len(data) if config.inner_by == "sets" else config.inner_folds,
                     "inner_by": config.inner_by, "inner_cv": detail, "members": len(fits)})
        info["risk"], choice = _risk(data, main_keep, config, features, inner_fits, rounds if len(fits) > 1 else 0)
        if choice:
            info["risk_choice"] = choice
        return [b for b, _ in fits], info
    train_pools, valid_parts = [], []
    for j, ex in enumerate(data):
        pool = main_keep if j == 0 else set(ex.qids)
        tr, va = split(sorted(pool), config.val_fraction, config.seed + j)
        train_pools.append(tr)
        valid_parts.append(ex.select(va))
    fits = [fit(_member_parts(data, config, m, train_pools), valid_parts, features,
                params=booster_params(config, features), rounds=config.rounds, early_stopping=config.early_stopping,
                seed=seed, init_col=init_column(config, features))
            for m, seed in enumerate(seeds)]
    info = fits[0][1]
    if len(fits) > 1:
        info.update({"members": len(fits), "member_best_iterations": [i["best_iteration"] for _, i in fits],
                     "valid_ndcg@10": None, "risk": config.risk or 0.0})
    return [b for b, _ in fits], info


def _member_parts(data: list[Examples], config: TrainConfig, member: int, pools: list[set[str]]) -> list:
    """The rows member ``member`` trains on, per set (of each set's ``pools``): :func:`member_sample`'s queries."""
    return [ex.select(member_sample(config, member, j, pool, len(data)))
            for j, (ex, pool) in enumerate(zip(data, pools))]


def _risk(data: list[Examples], main_keep: set[str], config: TrainConfig, features, inner_fits: list,
          rounds: int) -> tuple[float, dict | None]:
    """The risk of a model of several members fitted for ``rounds`` rounds (0: one member, or the init feature
    alone: no spread, risk 0): ``config.risk`` when set, else chosen out of fold; and the choice's record."""
    if not rounds or config.risk is not None:
        return (config.risk or 0.0) if rounds else 0.0, None
    oof = out_of_fold(data, inner_fits, config.members, rounds)
    return choose_risk(data, training_pools(data, main_keep), oof, init_column(config, features), config.risk_alpha)


def score_boosters(boosters, ex: Examples, keep: set[str], init_col: int | None = None, *,
                   rounds: int | None = None, risk: float = 0.0) -> dict[str, list[float]]:
    """The scores of the candidates of the queries in ``keep``, per query in candidate order: the members' mean
    prediction (minus ``risk`` times their spread) plus the init feature standardized per query (``init_col``);
    ``rounds=0``: that feature alone (:meth:`LTRModel.predict` of these boosters)."""
    rows = [i for i, q in enumerate(ex.qids) if q in keep]
    if not rows:
        return {}
    model = LTRModel(boosters, FEATURES, init_from=None if init_col is None else FEATURES[init_col], rounds=rounds,
                     risk=risk)
    qids = [ex.qids[i] for i in rows]
    return per_query(qids, model.predict(ex.X[rows], qids))


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
    card = _card(config, data)
    if config.folds:
        init_col = init_column(config, FEATURES)

        def fit_and_score(train_q: set[str], test: set[str]) -> tuple[Run, dict]:
            boosters, info = fit_on(data, train_q, config, FEATURES)
            log(f"  {info['train_queries']} training queries, {rounds_note(info)}")
            queries = [q for q in main.queries if q.id in test]
            candidates = Run({q.id: main.run.get(q.id, [])[:main_ds.depth] for q in queries})
            scores = score_boosters(boosters, main, test, init_col, rounds=info.get("rounds"),
                                    risk=info.get("risk", 0.0))
            return apply_scores(queries, candidates, main_ds.depth, scores, "ltr"), info

        cv_start = time.perf_counter()
        card["metrics"]["cross_validation"] = cross_validate(
            "ltr", all_main, config.folds, config.seed, fit_and_score, first_run=main.run,
            qrels=read_qrels(main_ds.qrels), measures=["nDCG@10", "RR@10", "AP", "R@100"],
            min_rel=config.min_rel, cv_run=config.cv_run, log=log)
        card["metrics"]["cross_validation"]["seconds"] = round(time.perf_counter() - cv_start, 2)
    t0 = time.perf_counter()
    boosters, info = fit_on(data, all_main, config, FEATURES)
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
    LTRModel(boosters, FEATURES, card, init_from=config.init_from, rounds=info.get("rounds"),
             risk=info.get("risk", 0.0)).save(config.out)
    log("feature importance (gain share): " + ", ".join(f"{n} {g:.3f}" for n, g in card["importance_gain"].items()))
    return card


def _card(config: TrainConfig, data: list[Examples]) -> dict:
    """The model card of a training, before its metrics: the sets trained on, the parameters."""
    return model_card(
        "ltr", model="LightGBM lambdarank", features=list(FEATURES), dists=("lightgbm",), command=config.command,
        training_data=[{**ds.record(SET_FIELDS), **({"first_stage": None} if ds.candidates else {}),
                        "topics_sha256": sha256_file(ds.topics), "qrels_sha256": sha256_file(ds.qrels),
                        **({"candidates_sha256": sha256_file(ds.candidates)} if ds.candidates else {}),
                        "queries": len(ex.queries), "rows": len(ex.qids)}  # rows: the (query, candidate) pairs
                       for ds, ex in zip(config.sets, data)],
        parameters={**DEFAULT_PARAMS, **booster_params(config, FEATURES), "rounds": config.rounds,
                    "rounds_by": config.rounds_by, "rounds_rule": config.rounds_rule,
                    "inner_folds": config.inner_folds, "inner_by": config.inner_by, "init_from": config.init_from,
                    "monotone": config.monotone,
                    "early_stopping": config.early_stopping, "val_fraction": config.val_fraction,
                    "seed": config.seed, "members": config.members, "member_seeds": member_seeds(config),
                    "member_queries": config.member_queries, "member_sets": config.member_sets,
                    "risk": config.risk, "risk_alpha": config.risk_alpha})


def rounds_note(info: dict) -> str:
    """How the number of boosting rounds was chosen, in words."""
    if "inner_cv_ndcg@10" in info:
        what = f"{info['best_iteration']} rounds" if info["best_iteration"] else "0 rounds (the init feature alone)"
        d = info.get("inner_cv", {})
        why = ""
        if d.get("rule") == "1se" and d["best_rounds"] != info["best_iteration"]:
            why = (f"; best {d['best_rounds']} rounds {d['best_inner_ndcg@10']:.4f}, one standard error "
                   f"{d['standard_error']:.4f}")
        folds = "leave-one-set-out" if info.get("inner_by") == "sets" else f"{info['inner_folds']}-fold"
        members = f" x {info['members']} members, risk {info.get('risk', 0.0):g}" if info.get("members", 1) > 1 else ""
        return f"{what}{members} (inner {folds} CV nDCG@10 {info['inner_cv_ndcg@10']:.4f}{why})"
    if info.get("members", 1) > 1:
        return (f"{info['members']} members, best iterations {info['member_best_iterations']}, risk "
                f"{info.get('risk', 0.0):g}")
    return f"best iteration {info['best_iteration']}, validation nDCG@10 {info['valid_ndcg@10'] or float('nan'):.4f}"
