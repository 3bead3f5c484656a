"""The number of boosting rounds by inner cross-validation (:func:`rounds_by_cv`): inner folds of every set's queries,
or one whole set held out at a time (:func:`inner_keeps`), the members' curves averaged, the best rounds or the
fewest within one (paired) standard error."""

from __future__ import annotations

import numpy as np

from weir.evaluation.folds import folds_of
from weir.training.ltr.boosting import fit
from weir.training.ltr.config import INNER_BY, TrainConfig, booster_params, init_column, member_sample, member_seeds
from weir.training.ltr.examples import Examples
from weir.core.types import InputError


def training_pools(data: list[Examples], main_keep: set[str]) -> list[set[str]]:
    """Each training set's queries trained on: the first set's ``main_keep``, every query of the others."""
    return [set(main_keep)] + [set(ex.qids) for ex in data[1:]]


def inner_keeps(data: list[Examples], main_keep: set[str], config: TrainConfig, seed: int | None = None):
    """The queries of each inner fold of :func:`rounds_by_cv`, as (training, validation) pairs of (set, query ids)
    lists.

    ``config.inner_by`` ``"queries"``: ``config.inner_folds`` folds of every set's queries (the first set's:
    ``main_keep``), drawn with ``seed`` (default ``config.seed``); fold k trains on the other folds of every set and
    validates on fold k of each set.
    ``"sets"``: leave one set out, one fold per training set; fold k trains on every other set and validates on set k
    alone, so the rounds chosen are those that carry over to a collection the trees never saw (what a shipped model
    meets), not to more queries of the collections they fit."""
    pools = training_pools(data, main_keep)
    if config.inner_by == "sets":
        if len(data) < 3:
            raise InputError(f"--inner-by sets holds out one training set at a time and needs at least 3 sets "
                             f"(--also), got {len(data)}")
        return [([(j, pools[j]) for j in range(len(data)) if j != k], [(k, pools[k])]) for k in range(len(data))]
    if config.inner_by != "queries":
        raise InputError(f"unknown --inner-by {config.inner_by!r}; known: {', '.join(INNER_BY)}")
    seed = config.seed if seed is None else seed
    folds = [folds_of(sorted(pool), config.inner_folds, seed + 1 + j) for j, pool in enumerate(pools)]
    return [([(j, pools[j] - folds[j][k]) for j in range(len(data))], [(j, folds[j][k]) for j in range(len(data))])
            for k in range(config.inner_folds)]


def rounds_by_cv(data: list[Examples], main_keep: set[str], config: TrainConfig, features,
                 fits: list | None = None) -> tuple[int, float, dict]:
    """The number of boosting rounds, by inner cross-validation (:func:`inner_keeps`): with ``inner_by="queries"``
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
    where it is smaller than their spread). Returns (rounds, their mean, the details); ``fits``, a list, receives
    each inner fold's (member, booster, the (set, query ids) it validated), for
    :func:`~weir.training.ltr.risk.out_of_fold`."""
    init_col = init_column(config, features)
    by_fold: list[list[np.ndarray]] = []  # per inner fold k, per member: [round 0 (init feature), round 1, ...]
    for m, seed in enumerate(member_seeds(config)):  # each member its own inner folds (repeated cross-validation)
        for k, (train, valid) in enumerate(inner_keeps(data, main_keep, config, seed)):
            if len(by_fold) <= k:
                by_fold.append([])
            train_parts = [data[j].select(member_sample(config, m, j, q, len(data))) for j, q in train]
            valid_parts = [data[j].select(q) for j, q in valid]
            if not any(p[2] for p in valid_parts) or not any(p[2] for p in train_parts):
                continue
            booster, info = fit(train_parts, valid_parts, features, params=booster_params(config, features),
                                rounds=config.rounds, early_stopping=None, seed=seed, init_col=init_col,
                                separate_valid=True)
            if fits is not None:
                fits.append((m, booster, valid))
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
